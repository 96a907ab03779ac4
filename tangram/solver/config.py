"""Solve configuration: how long, how precisely, which backends in which order."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field

from tangram.model.instance import Frozen


class SolveConfig(Frozen):
    """Parameters of one solve. Presets live in TOML files (:meth:`from_file`)."""

    time_limit_s: float = Field(default=10.0, gt=0, le=86_400, description="Wall-clock budget per backend, s.")
    tick_s: float = Field(default=0.01, gt=0, le=3600, description="Length of one solver time unit, s.")
    deterministic: bool = Field(
        default=False, description="Reproducible runs: one worker, fixed seed, deterministic time budget."
    )
    num_workers: int = Field(default=0, ge=0, le=64, description="Solver threads; 0: all cores.")
    seed: int = Field(default=0, ge=0)
    fallback: tuple[str, ...] = Field(default=("greedy",), description="Backends tried, in order, after the first.")
    warm_start: bool = Field(default=True, description="Hint exact backends with the greedy plan.")
    window: int | None = Field(
        default=None, ge=1, description="Exact model over the most urgent N actions only; the rest keep the greedy plan."
    )
    milp_solver: Literal["highs", "cbc"] = Field(default="highs", description="PuLP backend for 'milp'.")
    elastic: bool = Field(default=True, description="Greedy: water-fill leftover cores (False: fewest-core mode).")
    residency_aware: bool = Field(default=True, description="Greedy: prefer GPUs whose model is resident.")
    relaxation_bound: bool = Field(
        default=True, description="Strengthen the bound with tangram.solver.bound (costs about 1 ms per 2 actions)."
    )
    log: bool = Field(default=False, description="Print the backend's own search log.")

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> SolveConfig:
        """Load a preset from a TOML file's top-level keys (or its ``[solve]`` table)."""
        data = tomllib.loads(Path(path).read_text())
        data = data.get("solve", data)
        return cls(**{**data, **overrides})
