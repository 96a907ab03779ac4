"""Shared FIFO: one shared pool, action-level, first come first served, fixed degree.

A baseline behind the same :class:`~tangram.runtime.controller.Policy` seam as
the controller. Per resource class (cpu, gpu, api) the queue is served strictly
in arrival order: the head waits until its fixed-degree request fits anywhere
(its sandbox's node for CPU actions), and blocks the actions behind it.
Durations are the declared ones; nothing is learned; residency is ignored when
placing (the pools still charge model loads).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from tangram.model.compiled import expand_modes
from tangram.model.instance import Action, Sandbox
from tangram.model.schedule import Assignment, Placement
from tangram.runtime.controller import (
    ActionOutcome,
    Clock,
    EpochReport,
    Executor,
    Fleet,
    Job,
    hold_of,
    place_sandbox,
)
from tangram.runtime.estimator import Estimate, EstimateKey, base_seconds
from tangram.runtime.journal import Journal
from tangram.runtime.ledger import Ledger
from tangram.topology.graph import Topology


class SharedFifoPolicy:
    """FIFO per resource class with ``cores`` per CPU action and ``gpus`` per GPU action."""

    def __init__(self, fleet: Fleet, executor: Executor, clock: Clock, journal: Journal | None = None,
                 cores: int = 1, gpus: int = 1, min_epoch_interval_s: float = 0.0) -> None:
        self.fleet, self.executor, self.clock = fleet, executor, clock
        self.journal = journal if journal is not None else Journal()
        self.degree = {"cpu": cores, "gpu": gpus}
        self.min_epoch_interval_s = min_epoch_interval_s
        self.models = {m.id: m for m in fleet.models}
        self.ledger = Ledger(fleet)
        self._topology = Topology(fleet.instance())
        self.queues: dict[str, deque[Job]] = {}
        self.running: dict[str, Job] = {}
        self.sandboxes: dict[str, Sandbox] = {}
        self._seq = 0

    @classmethod
    def factory(cls, cores: int = 1, gpus: int = 1, min_epoch_interval_s: float = 0.0):
        """A :data:`~tangram.runtime.controller.PolicyFactory` with a fixed degree."""
        return lambda fleet, executor, clock, journal: cls(fleet, executor, clock, journal, cores, gpus,
                                                           min_epoch_interval_s)

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> Sandbox | None:
        if not self.fleet.nodes:
            return None
        node = place_sandbox(self.fleet.nodes, list(self.sandboxes.values()), memory_gb)
        if node is None:
            raise ValueError(f"sandbox: no node has {memory_gb:g} GiB free for trajectory {trajectory_id!r}")
        self.sandboxes[trajectory_id] = sb = Sandbox(id=trajectory_id, node=node, memory_gb=memory_gb)
        self.ledger.reserve(sb)
        return sb

    def close_trajectory(self, trajectory_id: str) -> None:
        sb = self.sandboxes.pop(trajectory_id, None)
        if sb is not None:
            self.ledger.reserve(sb, sign=-1)

    def submit(self, action: Action, payload: Any = None, tool: str | None = None) -> Job:
        base = base_seconds(action)
        job = Job(action=action, payload=payload, tool=tool or action.kind,
                  key=EstimateKey(action.task, tool or action.kind), estimate=Estimate(base, base), seq=self._seq)
        self._seq += 1
        self.queues.setdefault(self.queue_key(action), deque()).append(job)
        self.journal.append("accepted", self.clock.now(), action=action.model_dump(mode="json", exclude_defaults=True),
                            payload=payload, tool=job.tool)
        return job

    def queue_key(self, action: Action) -> Any:
        """The FIFO queue an action joins: one per resource class (subclasses split further)."""
        return action.kind

    def complete(self, action_id: str, outcome: ActionOutcome) -> None:
        self.running.pop(action_id)
        self.ledger.release(action_id)
        self.journal.append("completed", self.clock.now(), action=action_id, status=outcome.status,
                            duration_s=outcome.duration_s, load_s=outcome.load_s, signals=outcome.signals)

    def cancel(self, action_id: str) -> bool:
        for q in self.queues.values():
            for job in q:
                if job.action.id == action_id:
                    q.remove(job)
                    self.journal.append("cancelled", self.clock.now(), action=action_id)
                    return True
        if action_id in self.running:
            self.executor.cancel(action_id)
            return True
        return False

    def epoch(self, now: float) -> EpochReport:
        dispatched = []
        for q in self.queues.values():
            while q:
                asg = self._place(q[0].action, now)
                if asg is None:
                    break  # head-of-line blocking is what FIFO means
                job = q.popleft()
                self.ledger.acquire(job.action.id, hold_of(job.action, asg.mode, asg, self.models), now)
                job.assignment, job.dispatched_s = asg, now
                self.running[job.action.id] = job
                self.journal.append("dispatched", now, action=job.action.id, assignment=asg.model_dump(mode="json"),
                                    loads=[], load_s=0.0)
                self.executor.launch(job, asg)
                dispatched.append(job.action.id)
        pending = sum(len(q) for q in self.queues.values())
        return EpochReport(now, dispatched, pending, len(self.running), pending)

    def _place(self, a: Action, now: float) -> Assignment | None:
        """The fixed-degree request of the head of a queue, placed first-fit now; None if it does not fit."""
        modes = expand_modes(a, self.models)
        for k in self._mode_order(a, modes):
            m = modes[k]
            for placement, speed in self._placements(a, m):
                asg = Assignment(action=a.id, start_s=now, end_s=now + m.duration_s / speed, mode=k,
                                 placement=placement)
                if self.ledger.why_not(hold_of(a, k, asg, self.models), now) is None:
                    return asg
        return None

    def _mode_order(self, a: Action, modes) -> list[int]:
        """The mode with the fixed degree (else the largest below it, else the smallest)."""
        want = self.degree.get(a.kind, 1)
        size = [m.cores or m.gpus for m in modes]
        below = [k for k in range(len(modes)) if size[k] <= want]
        if below:
            return [max(below, key=lambda k: size[k])]
        return [min(range(len(modes)), key=lambda k: size[k])]

    def _placements(self, a: Action, m):
        if m.gpus:
            rm = self.models[a.model]
            gpus = {g.id: g for g in self.fleet.gpus}
            for block in self._topology.gpu_blocks(m.gpus):
                gs = [gpus[g] for g in block]
                if (rm.gpu_types and gs[0].type not in rm.gpu_types) or (m.gpu_type and gs[0].type != m.gpu_type):
                    continue
                if all(g.memory_gb >= rm.memory_gb for g in gs):
                    yield Placement(gpus=block), min(g.speed for g in gs)
        elif m.cores:
            nodes = [self.sandboxes[a.trajectory].node] if a.trajectory in self.sandboxes else \
                [n.id for n in self.fleet.nodes]
            for n in nodes:
                yield Placement(node=n, cores=m.cores), 1.0
        else:
            yield Placement(quota=m.quota), 1.0

