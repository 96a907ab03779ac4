"""Solvers behind one front door: :func:`solve`."""

from tangram.solver.base import Backend, Outcome, Plan
from tangram.solver.config import SolveConfig
from tangram.solver.registry import BACKENDS, backend, solve, to_schedule

__all__ = ["BACKENDS", "Backend", "Outcome", "Plan", "SolveConfig", "backend", "solve", "to_schedule"]
