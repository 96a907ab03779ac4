"""The discrete-event loop: arrivals, completions and epochs on a virtual clock.

At one instant, completions are handled before arrivals and both before an
epoch, so an epoch sees everything that happened at its time. An epoch is
requested after every arrival and completion (no earlier than the policy's
``min_epoch_interval_s`` after the last one) and at the time the last plan
named for its next start.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from tangram.analysis.runs import ActionRecord, records_from_events, summarise
from tangram.runtime.controller import Controller, ControllerConfig, Fleet, PolicyFactory
from tangram.runtime.estimator import Estimator
from tangram.runtime.journal import Journal
from tangram.runtime.sim.clock import VirtualClock
from tangram.runtime.sim.pools import SimulatedPools
from tangram.runtime.sim.workload import Workload, action_id

_COMPLETE, _OPEN, _ARRIVE, _EPOCH = 0, 1, 2, 3


@dataclass
class SimResult:
    """A finished simulation: per-action records, the journal and loop statistics."""

    records: list[ActionRecord]
    events: list[dict[str, Any]]
    epochs: int
    end_s: float  # virtual time of the last event
    wall_s: float  # real seconds the simulation took
    solve_s: float  # real seconds spent in solvers
    stats: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        return {**summarise(self.records), "epochs": self.epochs, "wall_s": self.wall_s, "solve_s": self.solve_s}


def tangram_policy(config: ControllerConfig | None = None, estimator: Estimator | None = None) -> PolicyFactory:
    """The Tangram controller as a simulator policy."""

    def make(fleet, executor, clock, journal):
        return Controller(fleet, executor, clock, config=config, estimator=estimator, journal=journal)

    return make


def simulate(workload: Workload, fleet: Fleet, policy: PolicyFactory | None = None, journal_path: str | None = None,
             max_events: int | None = None) -> SimResult:
    """Replay ``workload`` on ``fleet`` under ``policy`` (the greedy controller by default).

    Deterministic for a deterministic policy: the same inputs give the same records.
    ``journal_path`` also writes the journal as JSONL. Raises ``RuntimeError`` when an
    action never completes (the policy stalled) or after ``max_events`` events.
    """
    return _Simulation(workload, fleet, policy or tangram_policy(), journal_path).run(max_events)


class _Simulation:
    def __init__(self, workload: Workload, fleet: Fleet, policy: PolicyFactory, journal_path: str | None) -> None:
        self.workload = workload
        self.clock = VirtualClock(min((t.start_s for t in workload.trajectories), default=0.0))
        self.heap: list[tuple] = []
        self.seq = itertools.count()
        self.journal = Journal(journal_path, keep=True)
        self.pools = SimulatedPools(fleet, self.clock, lambda t, aid: self.push(t, _COMPLETE, aid))
        self.policy = policy(fleet, self.pools, self.clock, self.journal)
        self.interval = getattr(self.policy, "min_epoch_interval_s", 0.0)
        self.where: dict[str, tuple] = {}  # action id -> (trajectory, step) while in flight
        self.sandboxes: dict[str, Any] = {}
        self.epoch_at: float | None = None  # the one epoch event that is live
        self.last_epoch = -float("inf")
        self.epochs, self.solve_s = 0, 0.0

    def push(self, t: float, kind: int, data: Any) -> None:
        heapq.heappush(self.heap, (t, kind, next(self.seq), data))

    def want_epoch(self, t: float) -> None:
        t = max(t, self.last_epoch + self.interval)
        if self.epoch_at is None or t < self.epoch_at - 1e-12:
            self.epoch_at = t
            self.push(t, _EPOCH, t)

    def run(self, max_events: int | None) -> SimResult:
        t_wall = time.perf_counter()
        for traj in self.workload.trajectories:
            self.push(traj.start_s, _OPEN, traj)
        handlers = {_COMPLETE: self.on_complete, _OPEN: self.on_open, _ARRIVE: self.on_arrive, _EPOCH: self.on_epoch}
        handled = 0
        while self.heap:
            t, kind, _, data = heapq.heappop(self.heap)
            self.clock.advance_to(t)
            handled += 1
            if max_events is not None and handled > max_events:
                raise RuntimeError(f"simulate: more than {max_events} events")
            handlers[kind](t, data)
        self.journal.close()
        if self.where:
            raise RuntimeError(f"simulate: {len(self.where)} actions never completed, e.g. {next(iter(self.where))}")
        events = self.journal.events or []
        return SimResult(records=records_from_events(events), events=events, epochs=self.epochs,
                         end_s=self.clock.now(), wall_s=time.perf_counter() - t_wall, solve_s=self.solve_s,
                         stats=self.pools.stats())

    def on_open(self, t: float, traj) -> None:
        self.sandboxes[traj.id] = sb = self.policy.open_trajectory(traj.id, traj.sandbox_memory_gb)
        self.pools.open_sandbox(sb)
        if traj.steps:
            self.push(t + traj.steps[0].think_s, _ARRIVE, (traj, 0))

    def on_arrive(self, t: float, data) -> None:
        traj, k = data
        spec, aid = traj.steps[k].action, action_id(traj.id, k)
        self.where[aid] = data
        self.pools.expect(aid, spec)
        self.policy.submit(spec.action(aid, traj.id, traj.task, t), tool=spec.tool)
        self.want_epoch(t)

    def on_complete(self, t: float, aid: str) -> None:
        outcome = self.pools.finish(aid)
        if outcome is None:
            return  # the action was cancelled earlier
        self.policy.complete(aid, outcome)
        traj, k = self.where.pop(aid)
        if k + 1 < len(traj.steps):
            self.push(t + traj.steps[k + 1].think_s, _ARRIVE, (traj, k + 1))
        else:
            self.policy.close_trajectory(traj.id)
            self.pools.close_sandbox(self.sandboxes.pop(traj.id, None))
        self.want_epoch(t)

    def on_epoch(self, t: float, requested: float) -> None:
        if requested != self.epoch_at:
            return  # superseded by an earlier request
        self.epoch_at, self.last_epoch = None, t
        report = self.policy.epoch(t)
        self.epochs += 1
        self.solve_s += report.runtime_s
        if report.next_s is not None:
            self.want_epoch(report.next_s)
