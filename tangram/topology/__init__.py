"""Topology graph and the facts derived from it."""

from tangram.topology.graph import Topology, build_graph

__all__ = ["Topology", "build_graph"]
