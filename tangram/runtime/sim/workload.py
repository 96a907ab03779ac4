"""What the simulator replays: trajectories of think-then-act steps.

A trajectory opens its sandbox at ``start_s``; each step's action is issued
``think_s`` (LLM generation) after the previous action completed (the first one
``think_s`` after the start). Every action carries its *true* base duration,
which only the simulated pools see, and the *estimate* its submitter declares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tangram.model.instance import Action, Elastic, Mode

Status = Literal["ok", "failed", "timeout"]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action template: resource needs, estimated and true work.

    ``true_s`` and ``estimate_s`` are base seconds: on one core (cpu, Amdahl
    with ``parallel_fraction`` over ``cores``), on one speed-1 GPU of ``model``
    (gpu), or the call itself (api, consuming one call of ``quota``).
    """

    kind: Literal["cpu", "gpu", "api"]
    true_s: float
    estimate_s: float
    tool: str | None = None
    parallel_fraction: float = 0.0
    cores: tuple[int, ...] = (1, 2, 4, 8)
    memory_gb: float = 0.0
    model: str | None = None
    quota: str | None = None
    weight: float = 1.0
    input_mb: float = 0.0
    status: Status = "ok"  # what the run reports (a failed compile, a timeout)
    signals: dict[str, Any] = field(default_factory=dict)

    def action(self, id: str, trajectory: str, task: str, release_s: float) -> Action:
        """The action as its submitter declares it (durations from ``estimate_s``)."""
        common = dict(id=id, kind=self.kind, trajectory=trajectory, task=task, release_s=release_s,
                      weight=self.weight, input_mb=self.input_mb)
        if self.kind == "cpu":
            return Action(**common, elastic=Elastic(base_s=self.estimate_s, parallel_fraction=self.parallel_fraction,
                                                    cores=self.cores, memory_gb=self.memory_gb))
        if self.kind == "gpu":
            return Action(**common, model=self.model, work_s=self.estimate_s)
        return Action(**common, quota=self.quota, modes=(Mode(duration_s=self.estimate_s),))


@dataclass(frozen=True, slots=True)
class Step:
    """LLM think time, then one action."""

    think_s: float
    action: ActionSpec


@dataclass(frozen=True, slots=True)
class TrajectoryScript:
    """One rollout: a sandbox from ``start_s`` until its last action completes."""

    id: str
    task: str
    start_s: float
    steps: tuple[Step, ...]
    sandbox_memory_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class Workload:
    """The trajectories of one simulated run."""

    trajectories: tuple[TrajectoryScript, ...]
    name: str = "workload"

    @property
    def num_actions(self) -> int:
        return sum(len(t.steps) for t in self.trajectories)

    def truth(self) -> dict[str, float]:
        """Action id -> true base seconds (for :class:`~tangram.runtime.estimator.OracleEstimator`)."""
        return {action_id(t.id, k): s.action.true_s for t in self.trajectories for k, s in enumerate(t.steps)}


def action_id(trajectory: str, step: int) -> str:
    """The id the simulator gives step ``step`` of a trajectory."""
    return f"{trajectory}/{step}"


def synthetic(num_trajectories: int, steps: int = 4, seed: int = 0, arrival_s: float = 10.0,
              think_s: float = 2.0, model: str | None = None, quota: str | None = None,
              noise: float = 0.5) -> Workload:
    """A small random workload for tests and benchmarks (not a trace).

    Trajectories start uniformly over ``arrival_s``; each step thinks for an
    exponential time of mean ``think_s`` and then runs a code execution
    (log-normal true duration, estimate off by a factor up to ``noise``), a
    reward scoring on ``model`` (every third step, when given) or an API call
    on ``quota`` (every fifth, when given). A failed execution is followed by a
    longer one, so the previous outcome carries signal.
    """
    import random

    rng = random.Random(seed)
    trajs = []
    for j in range(num_trajectories):
        failed = False
        step_list = []
        for k in range(steps):
            true = rng.lognormvariate(0.0, 0.6) * (2.0 if failed else 1.0)
            est = true * rng.uniform(1 - noise, 1 + noise)
            if model and k % 3 == 2:
                spec = ActionSpec("gpu", true_s=true / 2, estimate_s=est / 2, tool="score", model=model)
            elif quota and k % 5 == 4:
                spec = ActionSpec("api", true_s=true / 4, estimate_s=est / 4, tool="search", quota=quota)
            else:
                failed = rng.random() < 0.3
                spec = ActionSpec("cpu", true_s=true, estimate_s=est, tool="exec", parallel_fraction=0.7,
                                  status="failed" if failed else "ok", signals={"exit_code": int(failed)})
            step_list.append(Step(think_s=rng.expovariate(1.0 / think_s), action=spec))
        trajs.append(TrajectoryScript(id=f"t{j}", task=f"task{j % 3}", start_s=rng.uniform(0, arrival_s),
                                      steps=tuple(step_list)))
    return Workload(tuple(trajs), name=f"synthetic-{num_trajectories}x{steps}-s{seed}")
