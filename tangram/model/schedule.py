"""Schedules and solver results: what every backend returns, in ids and seconds."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from tangram.model.instance import SCHEMA_VERSION, Frozen, Id, Seconds


class Placement(Frozen):
    """Where an action runs: node and core count, GPU set, API quota."""

    node: Id | None = None
    cores: int = Field(default=0, ge=0)
    gpus: tuple[Id, ...] = ()
    quota: Id | None = None


class Assignment(Frozen):
    """One action's decision."""

    action: Id
    start_s: Seconds
    end_s: Seconds
    mode: int = Field(ge=0, description="Index into the action's (expanded) modes.")
    placement: Placement = Placement()


class SolveStatus(StrEnum):
    """Solver-neutral outcome. 'No solution' is a normal result, not an exception."""

    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    INFEASIBLE = "INFEASIBLE"
    NO_SOLUTION_IN_TIME = "NO_SOLUTION_IN_TIME"
    MODEL_INVALID = "MODEL_INVALID"
    ERROR = "ERROR"

    def has_solution(self) -> bool:
        return self in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


class Attempt(Frozen):
    """One backend run inside a solve."""

    solver: str
    status: SolveStatus
    runtime_s: Seconds
    objective: float | None = None
    bound: float | None = None
    message: str = ""


class Metrics(Frozen):
    """Schedule quality in seconds, computed by :func:`tangram.model.check.evaluate`."""

    mean_act_s: float
    p50_act_s: float
    p99_act_s: float
    makespan_s: float
    model_load_s: float
    resource_seconds: float
    max_task_slowdown: float


class Result(Frozen):
    """What :func:`tangram.solve` returns and ``tangram solve`` writes."""

    schema_version: int = SCHEMA_VERSION
    instance: str
    status: SolveStatus
    solver: str = Field(description="Backend whose schedule this is ('' when none).")
    objective: float | None = Field(default=None, description="evaluate() of the schedule.")
    bound: float | None = Field(default=None, description="Proven lower bound on the objective.")
    runtime_s: Seconds
    attempts: tuple[Attempt, ...] = ()
    schedule: tuple[Assignment, ...] = ()
    hosting: dict[Id, tuple[Id, ...]] = Field(
        default_factory=dict, description="GPU id -> models it hosts in this plan."
    )
    metrics: Metrics | None = None

    @property
    def gap(self) -> float | None:
        """Relative optimality gap, or None where nothing was proven."""
        if self.objective is None or self.bound is None:
            return None
        return (self.objective - self.bound) / max(abs(self.objective), 1e-9)
