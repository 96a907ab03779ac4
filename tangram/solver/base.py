"""The backend protocol and the plan every backend returns in compiled form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tangram.model.compiled import Compiled
from tangram.model.schedule import SolveStatus
from tangram.solver.config import SolveConfig


@dataclass
class Plan:
    """One decision per action: (index into ``compiled.options(i)``, start tick)."""

    choice: list[tuple[int, int]]

    def end(self, compiled: Compiled, i: int) -> int:
        option, start = self.choice[i]
        return start + compiled.option(i, option).duration


@dataclass
class Outcome:
    """What a backend reports: status, plan (when found) and proven bound."""

    status: SolveStatus
    plan: Plan | None = None
    bound: float | None = None  # objective units (seconds), or None where nothing was proven
    message: str = ""
    stats: dict = field(default_factory=dict)


class Backend(Protocol):
    """A solver behind the front door."""

    name: str
    exact: bool  # proves optimality and bounds

    def is_installed(self) -> bool: ...

    def solve(self, compiled: Compiled, config: SolveConfig, initial: Plan | None) -> Outcome: ...
