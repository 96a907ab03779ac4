"""The action-level model: instances, schedules, the compiled form and the checker."""

from tangram.model.check import evaluate, metrics, violations
from tangram.model.compiled import Compiled, Option, compile_instance
from tangram.model.instance import (
    SCHEMA_VERSION,
    Action,
    ApiQuota,
    Constraints,
    CpuNode,
    Elastic,
    Gpu,
    Instance,
    Lag,
    Link,
    Mode,
    Objective,
    Parallelism,
    Renewable,
    RewardModel,
    Running,
    Sandbox,
)
from tangram.model.schedule import Assignment, Attempt, Metrics, Placement, Result, SolveStatus

__all__ = [
    "SCHEMA_VERSION", "Action", "ApiQuota", "Assignment", "Attempt", "Compiled", "Constraints", "CpuNode",
    "Elastic", "Gpu", "Instance", "Lag", "Link", "Metrics", "Mode", "Objective", "Option", "Parallelism",
    "Placement", "Renewable", "Result", "RewardModel", "Running", "Sandbox", "SolveStatus",
    "compile_instance", "evaluate", "metrics", "violations",
]
