"""Tangram: action-level scheduling of the external resources of agentic RL."""

from tangram.model import Instance, Result, SolveStatus, evaluate, violations
from tangram.solver import SolveConfig, solve

__version__ = "0.1.0"
__all__ = ["Instance", "Result", "SolveConfig", "SolveStatus", "__version__", "evaluate", "solve", "violations"]
