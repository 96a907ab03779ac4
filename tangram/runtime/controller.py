"""The controller: the epoch loop shared by the simulator and the live runtime.

Contract
--------
* The caller owns time and side effects. A :class:`Clock` and an
  :class:`Executor` are injected; the controller never sleeps, spawns or
  touches Ray. The same code runs under the simulator's virtual clock.
* ``submit(action, payload)`` accepts an :class:`~tangram.model.instance.Action`
  whose durations are hints; the controller replaces them with the estimator's
  estimate (the true duration is unknown to it) and journals ``accepted`` before
  returning. ``open_trajectory`` places a sandbox (most free memory, fewest
  sandboxes) and the trajectory's CPU actions then get sandbox affinity.
* ``epoch(now)`` is the decision: snapshot the most urgent pending actions (at
  most ``config.window``) plus the running ones into an
  :class:`~tangram.model.instance.Instance`, solve it through
  :func:`tangram.solver.solve` (time budget, greedy fallback), dispatch exactly
  the assignments that start now (an action that first loads its model counts
  as starting now when it is planned right after the load), keep the rest
  pending. Dispatch calls ``executor.launch(job, assignment)``; the assignment
  is re-timed so that ``start_s`` is when the action itself begins (after any
  model load) and ``end_s`` its estimated end.
* The executor reports back through ``complete(action_id, outcome)``; the
  measured duration trains the estimator; the outcome's status becomes the
  trajectory's ``prev`` signal. ``cancel`` drops a pending action or asks the
  executor to stop a running one (which then completes as ``cancelled``).
* Every state change goes to the :class:`~tangram.runtime.journal.Journal`.
* The controller is single-threaded: callers serialise calls (the service holds
  a lock; the simulator is sequential).

Any object with the methods of :class:`Policy` can replace the controller in the
simulator (baselines do).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from tangram.model.check import hosting
from tangram.model.compiled import compile_instance, expand_modes
from tangram.model.instance import (
    Action,
    ApiQuota,
    Constraints,
    CpuNode,
    Frozen,
    Gpu,
    Instance,
    Link,
    Objective,
    Renewable,
    RewardModel,
    Running,
    Sandbox,
)
from tangram.model.schedule import Assignment, Attempt, SolveStatus
from tangram.runtime.estimator import DurationEstimator, Estimate, EstimateKey, Estimator, base_seconds, with_base
from tangram.runtime.journal import Journal
from tangram.runtime.ledger import Hold, Ledger
from tangram.runtime.residency import Residency
from tangram.solver.config import SolveConfig
from tangram.solver.registry import solve
from tangram.topology.graph import Topology

Status = Literal["ok", "failed", "timeout", "cancelled"]

# --------------------------------------------------------------------------- injected parts


class Clock(Protocol):
    def now(self) -> float:
        """Current time, seconds."""
        ...


class WallClock:
    """Production time: seconds since the epoch (``time.time``)."""

    def now(self) -> float:
        return time.time()


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What an executor reports when an action ends.

    ``duration_s`` is the measured execution time, excluding any model load
    (``load_s``); ``signals`` are small facts for the estimator and the caller
    (exit code, timeout, ...); ``result`` is the payload returned to the caller.
    """

    status: Status = "ok"
    duration_s: float = 0.0
    load_s: float = 0.0
    signals: dict[str, Any] = field(default_factory=dict)
    result: Any = None


@dataclass(slots=True)
class Job:
    """The controller's record of one accepted action."""

    action: Action  # durations are the controller's estimate
    payload: Any
    tool: str
    key: EstimateKey
    estimate: Estimate
    seq: int
    assignment: Assignment | None = None  # set at dispatch (start after load, estimated end)
    dispatched_s: float | None = None
    loads: tuple[str, ...] = ()  # GPUs that load the model before the action starts
    load_s: float = 0.0
    running: Running | None = None  # its occupancy in later snapshots
    modes: tuple = ()  # the action's expanded modes (requests), for the quick fit test


class Executor(Protocol):
    """Side effects: start and stop actions. Completions come back via ``complete``."""

    def launch(self, job: Job, assignment: Assignment) -> None: ...

    def cancel(self, action_id: str) -> None: ...


class Fleet(Frozen):
    """The resources a controller schedules onto."""

    nodes: tuple[CpuNode, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    quotas: tuple[ApiQuota, ...] = ()
    renewables: tuple[Renewable, ...] = ()
    links: tuple[Link, ...] = ()
    models: tuple[RewardModel, ...] = ()

    @model_validator(mode="after")
    def _valid(self) -> Fleet:
        Instance(**self._fields())  # duplicate ids, models that fit no GPU, ...
        return self

    def instance(self, **parts: Any) -> Instance:
        """An instance over this fleet, unvalidated (``model_construct``): the fleet was
        validated once and ``parts`` must come from validated objects too."""
        return Instance.model_construct(**self._fields(), **parts)

    def _fields(self) -> dict[str, Any]:
        return dict(nodes=self.nodes, gpus=self.gpus, quotas=self.quotas, renewables=self.renewables,
                    links=self.links, models=self.models)


def place_sandbox(nodes: tuple[CpuNode, ...], sandboxes: list[Sandbox], memory_gb: float) -> str | None:
    """The node for a new sandbox: most free memory, then fewest sandboxes, then fleet order.

    Nodes that declare no memory (0: untracked) count as having room. None when
    no node can hold ``memory_gb``.
    """
    used: dict[str, float] = {n.id: 0.0 for n in nodes}
    count: dict[str, int] = {n.id: 0 for n in nodes}
    for s in sandboxes:
        used[s.node] += s.memory_gb
        count[s.node] += 1
    best, best_key = None, None
    for k, n in enumerate(nodes):
        free = n.memory_gb - used[n.id] if n.memory_gb > 0 else float("inf")
        if free < memory_gb - 1e-9:
            continue
        key = (-free, count[n.id], k)
        if best_key is None or key < best_key:
            best, best_key = n.id, key
    return best


# --------------------------------------------------------------------------- configuration


class ControllerConfig(Frozen):
    """How the controller decides. Presets can live in TOML like :class:`SolveConfig`."""

    solver: str = Field(default="greedy", description="Backend of every epoch (see tangram.solver.BACKENDS).")
    fallback: tuple[str, ...] = Field(default=("greedy",), description="Backends tried after it.")
    time_limit_s: float = Field(default=0.05, gt=0, le=60, description="Solver budget per epoch, s.")
    tick_s: float = Field(default=0.01, gt=0, le=60, description="Solver time unit, s.")
    min_epoch_interval_s: float = Field(default=0.02, ge=0, le=60, description="Least time between epochs, s.")
    window: int = Field(default=256, ge=1, description="Most pending actions in one epoch's snapshot.")
    exact_window: int | None = Field(default=None, ge=1, description="SolveConfig.window for exact backends.")
    deterministic: bool = Field(default=False, description="Reproducible solver runs (one worker, fixed seed).")
    seed: int = Field(default=0, ge=0)
    elastic: bool = Field(default=True, description="Greedy: water-fill leftover cores.")
    residency_aware: bool = Field(default=True, description="Greedy: prefer GPUs whose model is resident.")
    overdue_s: float = Field(default=0.5, gt=0, description="An overrunning action is assumed to end this much later, s.")
    objective: Objective = Objective()
    constraints: Constraints = Constraints()

    def solve_config(self) -> SolveConfig:
        return SolveConfig(time_limit_s=self.time_limit_s, tick_s=self.tick_s, deterministic=self.deterministic,
                           num_workers=1 if self.deterministic else 0, seed=self.seed, fallback=self.fallback,
                           window=self.exact_window, elastic=self.elastic,
                           residency_aware=self.residency_aware, relaxation_bound=False)


@dataclass
class EpochReport:
    """What one epoch decided."""

    now_s: float
    dispatched: list[str]
    pending: int  # still pending after the epoch
    running: int
    window: int  # pending actions in the snapshot
    status: SolveStatus | None = None  # None: nothing to plan
    solver: str = ""
    runtime_s: float = 0.0
    attempts: tuple[Attempt, ...] = ()
    next_s: float | None = None  # when the plan next wants an epoch (a planned start), or None


class Policy(Protocol):
    """The seam the simulator (and the service) drive; the controller is one policy.

    A policy takes actions in, decides in ``epoch(now)`` (launching through its
    executor) and takes outcomes back. ``min_epoch_interval_s`` tells the
    driver how often epochs may run.
    """

    min_epoch_interval_s: float

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> Sandbox | None: ...

    def close_trajectory(self, trajectory_id: str) -> None: ...

    def submit(self, action: Action, payload: Any = None, tool: str | None = None) -> Job: ...

    def complete(self, action_id: str, outcome: ActionOutcome) -> None: ...

    def cancel(self, action_id: str) -> bool: ...

    def epoch(self, now: float) -> EpochReport: ...


def hold_of(action: Action, mode_index: int, assignment: Assignment, models: dict[str, RewardModel]) -> Hold:
    """The resources an assignment holds while it runs."""
    m = expand_modes(action, models)[mode_index]
    p = assignment.placement
    return Hold(node=p.node if m.cores else None, cores=m.cores, memory_gb=m.memory_gb, gpus=p.gpus,
                quota=m.quota, renewable=tuple(sorted((r, u) for r, u in m.renewable.items() if u)))


# --------------------------------------------------------------------------- controller


class Controller:
    """Action-level scheduler: pending actions in, dispatches out, one epoch at a time.

    Parameters
    ----------
    fleet
        The resources.
    executor
        Starts and stops actions.
    clock
        Time for submissions and completions (epochs take ``now`` explicitly).
    config
        Solver, budgets, window, objective and constraint switches.
    estimator
        Duration estimates; a :class:`DurationEstimator` with default priors if None.
    journal
        Where events go; a journal that keeps nothing if None.
    """

    def __init__(self, fleet: Fleet, executor: Executor, clock: Clock, config: ControllerConfig | None = None,
                 estimator: Estimator | None = None, journal: Journal | None = None) -> None:
        self.fleet, self.executor, self.clock = fleet, executor, clock
        self.config = config or ControllerConfig()
        self.estimator = estimator if estimator is not None else DurationEstimator()
        self.journal = journal if journal is not None else Journal()
        self.models = {m.id: m for m in fleet.models}
        self.residency = Residency({g.id: g.memory_gb for g in fleet.gpus},
                                   {m.id: m.memory_gb for m in fleet.models})
        self.ledger = Ledger(fleet)
        self.pending: dict[str, Job] = {}  # insertion order = arrival order
        self.running: dict[str, Job] = {}
        self.finished_end: dict[str, float] = {}  # action -> end, for lags of later submissions
        self.sandboxes: dict[str, Sandbox] = {}  # trajectory -> sandbox
        self.prev: dict[str, str] = {}  # trajectory -> status of its last call
        self._seq = itertools.count()
        self._solve_config = self.config.solve_config()
        self._shapes: dict[tuple, bool] = {}  # action shapes that passed validation
        topology = Topology(fleet.instance())
        self._blocks = {k: topology.gpu_blocks(k, self.config.constraints.nvlink_gang) for k in (1, 2, 4, 8)}

    @property
    def min_epoch_interval_s(self) -> float:
        """Least time between two epochs, seconds (whoever triggers epochs honours it)."""
        return self.config.min_epoch_interval_s

    # ------------------------------------------------------------------ trajectories

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> Sandbox | None:
        """Place the trajectory's sandbox; None when the fleet has no CPU node."""
        if trajectory_id in self.sandboxes:
            return self.sandboxes[trajectory_id]
        if not self.fleet.nodes:
            return None
        node = place_sandbox(self.fleet.nodes, list(self.sandboxes.values()), memory_gb)
        if node is None:
            raise ValueError(f"sandbox: no node has {memory_gb:g} GiB free for trajectory {trajectory_id!r}")
        sb = Sandbox(id=trajectory_id, node=node, memory_gb=memory_gb)
        self.sandboxes[trajectory_id] = sb
        self.ledger.reserve(sb)
        self.journal.append("sandbox_open", self.clock.now(), trajectory=trajectory_id, node=node,
                            memory_gb=memory_gb)
        return sb

    def close_trajectory(self, trajectory_id: str) -> None:
        """Release the sandbox; the trajectory's still pending actions are cancelled (running ones finish)."""
        for aid in [j.action.id for j in self.pending.values() if j.action.trajectory == trajectory_id]:
            self.cancel(aid)
        sb = self.sandboxes.pop(trajectory_id, None)
        self.prev.pop(trajectory_id, None)
        if sb is not None:
            self.ledger.reserve(sb, sign=-1)
            self.journal.append("sandbox_close", self.clock.now(), trajectory=trajectory_id, node=sb.node)

    # ------------------------------------------------------------------ intake

    def submit(self, action: Action, payload: Any = None, tool: str | None = None) -> Job:
        """Accept an action: validate it against the fleet, estimate it, journal it.

        Raises ``ValueError`` (naming the rule) for an unknown model, quota or
        sandbox, a duplicate id, or an action no resource of the fleet can run.
        """
        if action.id in self.pending or action.id in self.running or action.id in self.finished_end:
            raise ValueError(f"actions: duplicate id {action.id!r}")
        if (action.kind == "cpu" and action.sandbox is None and action.trajectory in self.sandboxes
                and self.config.constraints.affinity):
            action = action.model_copy(update={"sandbox": self.sandboxes[action.trajectory].id})
        self._validate(action)
        tool = tool or action.kind
        key = EstimateKey(action.task, tool, self.prev.get(action.trajectory or "", "none"))
        est = self.estimator.estimate(action, key)
        job = Job(action=action, payload=payload, tool=tool, key=key, estimate=est, seq=next(self._seq))
        job.action = with_base(action, est.mean_s)
        job.modes = expand_modes(job.action, self.models)
        self.journal.append("accepted", self.clock.now(), action=action.model_dump(mode="json",
                            exclude_defaults=True), payload=payload, tool=tool, prev=key.prev,
                            estimate_s=est.mean_s, estimate_source=est.source)
        self.pending[action.id] = job
        return job

    def _validate(self, action: Action) -> None:
        """The instance rules and "some mode fits the fleet", cached by the action's shape.

        Everything those rules read, apart from lags and the deadline, is in the
        shape (kind, model, quota, sandbox node, mode requests), so one full check
        per shape is enough; lags are checked here against known actions.
        """
        unknown = [lag.action for lag in action.after
                   if lag.action not in self.pending and lag.action not in self.running
                   and lag.action not in self.finished_end]
        if unknown:
            raise ValueError(f"actions[{action.id}].after: unknown action {unknown[0]!r}")
        sandbox = self.sandboxes.get(action.sandbox) if action.sandbox else None
        modes = tuple((m.cores, m.memory_gb, m.gpus, m.gpu_type, m.quota, tuple(sorted(m.renewable.items())))
                      for m in action.modes)
        elastic = action.elastic.cores if action.elastic else None
        shape = (action.kind, action.model, action.quota, action.sandbox and (sandbox.node if sandbox else None),
                 modes, elastic, action.work_s is not None,
                 action.deadline_s is not None and action.deadline_s < action.release_s)
        if self._shapes.get(shape):
            return
        probe = action.model_copy(update={"after": ()})
        inst = Instance(**self.fleet._fields(), sandboxes=tuple(self.sandboxes.values()), actions=(probe,),
                        constraints=self.config.constraints)
        if not compile_instance(inst, self.config.tick_s).options(0):
            raise ValueError(f"actions[{action.id}]: no mode fits any resource of the fleet")
        self._shapes[shape] = True

    # ------------------------------------------------------------------ feedback

    def complete(self, action_id: str, outcome: ActionOutcome) -> None:
        """An action ended: free its resources, learn from it, journal it."""
        job = self.running.pop(action_id, None)
        now = self.clock.now()
        if job is None:
            raise KeyError(f"complete: {action_id!r} is not running")
        self.ledger.release(action_id)
        self.finished_end[action_id] = now
        if job.action.trajectory:
            self.prev[job.action.trajectory] = outcome.status
        if outcome.status != "cancelled" and job.assignment is not None:
            planned = job.assignment.end_s - job.assignment.start_s
            if planned > 0 and outcome.duration_s > 0:
                self.estimator.observe(job.action, job.key, base_seconds(job.action) * outcome.duration_s / planned)
        self.journal.append("completed", now, action=action_id, status=outcome.status,
                            duration_s=outcome.duration_s, load_s=outcome.load_s, signals=outcome.signals)

    def cancel(self, action_id: str) -> bool:
        """Drop a pending action, or ask the executor to stop a running one. False if unknown."""
        if action_id in self.pending:
            del self.pending[action_id]
            self.finished_end[action_id] = self.clock.now()
            self.journal.append("cancelled", self.clock.now(), action=action_id)
            return True
        if action_id in self.running:
            self.executor.cancel(action_id)  # it completes with status "cancelled"
            return True
        return False

    # ------------------------------------------------------------------ the epoch

    def snapshot(self, now: float, actions: tuple[Action, ...] | None = None) -> Instance:
        """Pending (``actions``, by default :meth:`window`) plus running actions as an instance.

        Built with ``model_construct``: every action was validated on submission
        and every other part comes from the validated fleet, so re-validating
        each epoch would only cost time.
        """
        if actions is None:
            actions = self.window(now)[0]
        running = []
        for job in self.running.values():
            r = job.running
            if r.end_s <= now:  # overrunning: assume it ends a little later
                r = r.model_copy(update={"end_s": now + self.config.overdue_s})
            running.append(r)
        return self.fleet.instance(
            name=f"epoch@{now:.3f}", now_s=now, resident=self.residency.snapshot(),
            sandboxes=tuple(self.sandboxes.values()), actions=actions, running=tuple(running),
            objective=self.config.objective, constraints=self.config.constraints)

    def window(self, now: float) -> tuple[tuple[Action, ...], int]:
        """The at most ``config.window`` pending actions to plan, and how many of them may start now.

        Actions that may start now come first (in arrival order), then the oldest
        of the others, so that actions blocked on one pool never hide work another
        pool could start. Lags to finished actions become release times; an action
        whose predecessor has not been dispatched waits.
        """
        size = self.config.window
        ready: list[Action] = []
        waiting: list[Action] = []
        blocked: set[tuple] = set()  # request shapes found not startable in this epoch
        for job in self.pending.values():
            a = job.action
            if a.after:
                a = self._resolve_lags(a)
                if a is None:
                    continue
            shape = (a.kind, a.model, a.quota, a.sandbox, a.release_s > now, tuple((m.cores, m.gpus) for m in job.modes))
            if shape not in blocked and self._may_start(a, job.modes, now):
                ready.append(a)
                if len(ready) >= size:
                    break
            else:
                blocked.add(shape)
                if len(waiting) < size:
                    waiting.append(a)
        return tuple(ready + waiting[:size - len(ready)]), len(ready)

    def _resolve_lags(self, a: Action) -> Action | None:
        keep, release = [], a.release_s
        for lag in a.after:
            if lag.action in self.running:
                keep.append(lag)
            elif lag.action in self.finished_end:
                release = max(release, self.finished_end[lag.action] + lag.lag_s)
            else:
                return None
        return a.model_copy(update={"after": tuple(keep), "release_s": release})

    def epoch(self, now: float) -> EpochReport:
        """Plan the pending actions and dispatch those that start now."""
        actions, ready = self.window(now)
        if not actions:
            return EpochReport(now, [], len(self.pending), len(self.running), 0)
        if not ready:
            # Only starts at `now` are dispatched, and none can happen: skip the solve.
            return EpochReport(now, [], len(self.pending), len(self.running), len(actions),
                               next_s=self._next_change(actions, now))
        inst = self.snapshot(now, actions)
        cfg = self.config
        result = solve(inst, solver=cfg.solver, config=self._solve_config)
        attempts = result.attempts
        if not result.status.has_solution() and cfg.constraints.deadlines and any(a.deadline_s for a in inst.actions):
            # Missed deadlines must not stall the fleet: plan again, best effort.
            relaxed = inst.model_copy(update={"constraints": cfg.constraints.model_copy(update={"deadlines": False})})
            result = solve(relaxed, solver=cfg.solver, config=self._solve_config)
            attempts += result.attempts
        dispatched: list[str] = []
        next_s: float | None = None
        if result.status.has_solution():
            host = hosting(inst, ())  # running actions pin their models
            for asg in result.schedule:
                job = self.pending[asg.action]
                load_s, loads = self._loads(job.action, asg)
                begin = asg.start_s - (load_s if cfg.constraints.model_residency else 0.0)
                if begin > now + cfg.tick_s * 1.001:
                    next_s = begin if next_s is None else min(next_s, begin)
                    continue
                hold = hold_of(job.action, asg.mode, asg, self.models)
                if self.ledger.why_not(hold, now) is not None:
                    wake = self.ledger.token_free_at(hold.quota) if hold.quota else None
                    if wake is not None:
                        next_s = wake if next_s is None else min(next_s, wake)
                    continue
                if self._dispatch(job, asg, hold, loads, load_s, now, host):
                    dispatched.append(job.action.id)
        self.journal.append("solve", now, solver=result.solver, status=result.status.value,
                            runtime_s=result.runtime_s, pending=len(self.pending) + len(dispatched),
                            window=len(inst.actions), dispatched=len(dispatched),
                            attempts=[a.model_dump(mode="json") for a in attempts])
        return EpochReport(now, dispatched, len(self.pending), len(self.running), len(inst.actions),
                           result.status, result.solver, result.runtime_s, attempts, next_s)

    def _may_start(self, a: Action, modes: tuple, now: float) -> bool:
        """Whether some mode of ``a`` could start now on what is free (a superset test:
        GPU types, model memory and lags are left to the solver)."""
        if a.release_s > now + self.config.tick_s or any(lag.action in self.running for lag in a.after):
            return False
        led = self.ledger
        for m in modes:
            if m.quota and (led.quota[m.quota] < 1 or led.tokens(m.quota, now) < 1):
                continue
            if any(u > led.renewable[r] for r, u in m.renewable.items()):
                continue
            if m.cores:
                nodes = (self.sandboxes[a.sandbox].node,) if (a.sandbox and self.config.constraints.affinity) \
                    else led.cores
                if not any(led.cores[n] >= m.cores and (not led.memory_checked[n] or led.memory[n] >= m.memory_gb)
                           for n in nodes):
                    continue
            if m.gpus and not any(led.gpus_busy.isdisjoint(b) for b in self._blocks[m.gpus]):
                continue
            return True
        return False

    def _next_change(self, actions, now: float) -> float | None:
        """The next time something pending may become startable without an event: a release or a rate token."""
        times = [a.release_s for a in actions if a.release_s > now]
        times += [t for q in self.ledger.rate if (t := self.ledger.token_free_at(q)) is not None and t > now]
        return min(times, default=None)

    def _loads(self, action: Action, asg: Assignment) -> tuple[float, tuple[str, ...]]:
        if not action.model:
            return 0.0, ()
        loads = tuple(g for g in asg.placement.gpus if not self.residency.has(action.model, g))
        return (self.models[action.model].load_s if loads else 0.0), loads

    def _dispatch(self, job: Job, asg: Assignment, hold: Hold, loads: tuple[str, ...], load_s: float,
                  now: float, host: dict[str, set[str]]) -> bool:
        a = job.action
        if a.model:
            for g in asg.placement.gpus:
                try:
                    loaded, evicted = self.residency.use(a.model, g, pinned=host.get(g, ()))
                except MemoryError:  # only without the residency constraint: wait for the GPU to empty
                    return False
                for m in evicted:
                    self.journal.append("evict", now, gpu=g, model=m)
                if loaded:
                    self.journal.append("load", now, gpu=g, model=a.model, load_s=load_s)
                host.setdefault(g, set()).add(a.model)
        start = now + load_s
        asg = asg.model_copy(update={"start_s": start, "end_s": start + (asg.end_s - asg.start_s)})
        del self.pending[a.id]
        self.ledger.acquire(a.id, hold, now)
        job.assignment, job.dispatched_s, job.loads, job.load_s = asg, now, loads, load_s
        job.running = Running.model_construct(
            action=a.id, task=a.task, end_s=asg.end_s, node=hold.node, cores=hold.cores, memory_gb=hold.memory_gb,
            gpus=hold.gpus, model=a.model, quota=hold.quota, renewable=dict(hold.renewable))
        self.running[a.id] = job
        self.journal.append("dispatched", now, action=a.id, assignment=asg.model_dump(mode="json"),
                            loads=list(loads), load_s=load_s)
        self.executor.launch(job, asg)
        return True


#: Builds a policy for a fleet, executor, clock and journal (the simulator's plug).
PolicyFactory = Callable[[Fleet, Executor, Clock, Journal], Policy]
