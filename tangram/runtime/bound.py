"""Trajectory-bound static provisioning: the baseline that today's RL frameworks implement.

A policy behind the same :class:`~tangram.runtime.controller.Policy` seam as the
controller, built on :class:`~tangram.runtime.sim.fifo.SharedFifoPolicy`:

- opening a trajectory binds ``cores_per_trajectory`` cores of one node to it for
  its whole life (they sit idle while the LLM generates); opening fails when no
  node has that many unbound cores, which is why drivers cap concurrent
  trajectories with a semaphore of ``sum(cores) // cores_per_trajectory``;
- its CPU actions run on those cores (its sandbox's node, the fixed degree);
- reward scoring runs first come first served on fixed replicas dedicated to each
  task (``replicas``: task -> GPU ids); a task without replicas uses any GPU;
- API calls are first come first served under their quota.
"""

from __future__ import annotations

from collections.abc import Mapping

from tangram.model.instance import Sandbox
from tangram.runtime.controller import Clock, Executor, Fleet
from tangram.runtime.journal import Journal
from tangram.runtime.sim.fifo import SharedFifoPolicy


class TrajectoryBoundPolicy(SharedFifoPolicy):
    """Cores bound to trajectories for life, reward replicas dedicated per task."""

    def __init__(self, fleet: Fleet, executor: Executor, clock: Clock, journal: Journal | None = None,
                 cores_per_trajectory: int = 1, replicas: Mapping[str, tuple[str, ...]] | None = None,
                 min_epoch_interval_s: float = 0.0) -> None:
        super().__init__(fleet, executor, clock, journal, cores=cores_per_trajectory, gpus=1,
                         min_epoch_interval_s=min_epoch_interval_s)
        self.cores_per_trajectory = cores_per_trajectory
        self.replicas = {task: frozenset(gs) for task, gs in (replicas or {}).items()}
        self.bound = {n.id: 0 for n in fleet.nodes}  # node -> cores bound to open trajectories

    @classmethod
    def factory(cls, cores_per_trajectory: int = 1, replicas: Mapping[str, tuple[str, ...]] | None = None,
                min_epoch_interval_s: float = 0.0):
        """A :data:`~tangram.runtime.controller.PolicyFactory`."""
        return lambda fleet, executor, clock, journal: cls(fleet, executor, clock, journal, cores_per_trajectory,
                                                           replicas, min_epoch_interval_s)

    @staticmethod
    def max_trajectories(fleet: Fleet, cores_per_trajectory: int) -> int:
        """The semaphore that never lets an open fail: how many trajectories the nodes can bind."""
        return sum(n.cores // cores_per_trajectory for n in fleet.nodes)

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> Sandbox | None:
        if trajectory_id in self.sandboxes:
            return self.sandboxes[trajectory_id]
        c = self.cores_per_trajectory
        free = [n for n in self.fleet.nodes if n.cores - self.bound[n.id] >= c]
        if not free:
            raise ValueError(f"sandbox: no node has {c} unbound cores for trajectory {trajectory_id!r}")
        node = max(free, key=lambda n: n.cores - self.bound[n.id]).id
        self.bound[node] += c
        self.sandboxes[trajectory_id] = sb = Sandbox(id=trajectory_id, node=node, memory_gb=memory_gb)
        self.ledger.reserve(sb)
        self.journal.append("sandbox_open", self.clock.now(), trajectory=trajectory_id, node=node,
                            memory_gb=memory_gb, cores=c)
        return sb

    def close_trajectory(self, trajectory_id: str) -> None:
        sb = self.sandboxes.get(trajectory_id)
        if sb is not None:
            self.bound[sb.node] -= self.cores_per_trajectory
            super().close_trajectory(trajectory_id)
            self.journal.append("sandbox_close", self.clock.now(), trajectory=trajectory_id, node=sb.node)

    def _placements(self, a, m):
        """The base placements, GPU ones restricted to the task's dedicated replicas."""
        mine = self.replicas.get(a.task)
        for placement, speed in super()._placements(a, m):
            if m.gpus and mine is not None and not mine.issuperset(placement.gpus):
                continue
            yield placement, speed
