"""Workloads built from the bundled real traces."""
