"""The provisioning of today's RL frameworks, as simulator policies.

Both baselines run behind the same :class:`~tangram.runtime.controller.Policy`
seam, on the same fleet, pools and workload as Tangram (see DESIGN "Baselines"):

* :class:`TrajectoryBoundPolicy`: each admitted trajectory holds a sandbox with
  ``cores`` cores from admission until its last action ends (idle while the
  LLM generates); a global semaphore caps admitted trajectories; reward models
  have a fixed number of replicas per task on dedicated GPUs.
* :class:`TaskIsolatedPolicy`: each task owns a fixed share of every node's
  cores and a fixed set of GPUs; within its share, first come first served
  with a fixed degree.

API quotas are external services shared by everyone, served FIFO as in
:class:`~tangram.runtime.sim.fifo.SharedFifoPolicy`. Holds that outlive an
action (trajectory cores, dedicated GPUs) are journalled as ``hold`` /
``release`` events so that resource-seconds count them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tangram.model.compiled import expand_modes
from tangram.model.instance import Action, Sandbox
from tangram.model.schedule import Assignment, Placement
from tangram.runtime.controller import ActionOutcome, Fleet
from tangram.runtime.sim.fifo import SharedFifoPolicy
from tangram.runtime.sim.workload import Workload
from tangram.topology.graph import Topology

GpuKey = tuple[str, str]  # (task, model)


# --------------------------------------------------------------------------- static sizing (pure)


def gpu_demand(workload: Workload, fleet: Fleet) -> dict[GpuKey, float]:
    """GPU-seconds each (task, model) needs at the model's smallest degree, from the step's true work."""
    models = {m.id: m for m in fleet.models}
    out: dict[GpuKey, float] = {}
    for t in workload.trajectories:
        for s in t.steps:
            if s.action.kind == "gpu":
                p = min(models[s.action.model].parallelism, key=lambda p: p.gpus)
                key = (t.task, s.action.model)
                out[key] = out.get(key, 0.0) + s.action.true_s / p.speedup * p.gpus
    return out


def cpu_demand(workload: Workload) -> dict[str, float]:
    """Core-seconds (on one core) of each task's CPU actions, from the step's true work."""
    out: dict[str, float] = {}
    for t in workload.trajectories:
        out[t.task] = out.get(t.task, 0.0) + sum(s.action.true_s for s in t.steps if s.action.kind == "cpu")
    return out


def partition_gpus(fleet: Fleet, demand: Mapping[GpuKey, float],
                   shares: Mapping[str, float] | None = None) -> dict[GpuKey, list[tuple[str, ...]]]:
    """Dedicated replicas per (task, model) at the model's smallest degree, sized to demand.

    Every key with demand gets one replica first (largest demand first); then
    each further replica goes to the key with the most demand per replica GPU,
    while an aligned block of free, eligible GPUs (type, memory, one NVLink
    domain) is left. With ``shares`` (task -> fraction), a task gets no more
    GPUs than its share of the fleet, after its first replica.

    Raises ``ValueError`` when some key cannot get a single replica.
    """
    models = {m.id: m for m in fleet.models}
    gpus = {g.id: g for g in fleet.gpus}
    topo = Topology(fleet.instance())
    taken: set[str] = set()
    out: dict[GpuKey, list[tuple[str, ...]]] = {k: [] for k in demand if demand[k] > 0}

    def degree(key: GpuKey) -> int:
        return min(p.gpus for p in models[key[1]].parallelism)

    def free_block(key: GpuKey) -> tuple[str, ...] | None:
        rm = models[key[1]]
        for b in topo.gpu_blocks(degree(key)):
            if taken.isdisjoint(b) and all(gpus[g].memory_gb >= rm.memory_gb and
                                           (not rm.gpu_types or gpus[g].type in rm.gpu_types) for g in b):
                return b
        return None

    def give(key: GpuKey) -> bool:
        b = free_block(key)
        if b is None:
            return False
        out[key].append(b)
        taken.update(b)
        return True

    for key in sorted(out, key=lambda k: -demand[k]):
        if not give(key):
            raise ValueError(f"partition: no free {degree(key)}-GPU block for model {key[1]} of task {key[0]}")
    cap = {t: s * len(gpus) for t, s in (shares or {}).items()}
    open_keys = set(out)
    while open_keys:
        key = max(sorted(open_keys), key=lambda k: demand[k] / (len(out[k]) * degree(k)))
        used = sum(len(b) for k, bs in out.items() if k[0] == key[0] for b in bs)
        if (key[0] in cap and used + degree(key) > cap[key[0]] + 1e-9) or not give(key):
            open_keys.discard(key)
    return out


def split_cores(fleet: Fleet, shares: Mapping[str, float]) -> dict[str, dict[str, int]]:
    """task -> node -> cores: every node's cores split in proportion to ``shares`` (largest remainder),
    at least one core per task with a positive share."""
    tasks = sorted(t for t, s in shares.items() if s > 0)
    total = sum(shares[t] for t in tasks)
    out: dict[str, dict[str, int]] = {t: {} for t in tasks}
    for n in fleet.nodes:
        raw = {t: max(1.0, n.cores * shares[t] / total) for t in tasks}
        got = {t: int(raw[t]) for t in tasks}
        for t in sorted(tasks, key=lambda t: got[t] - raw[t])[: max(0, n.cores - sum(got.values()))]:
            got[t] += 1
        for t in tasks:
            out[t][n.id] = got[t]
    return out


# --------------------------------------------------------------------------- trajectory-bound


class TrajectoryBoundPolicy(SharedFifoPolicy):
    """Trajectory-bound static provisioning.

    Parameters
    ----------
    cores
        Cores a trajectory's sandbox holds for the trajectory's whole life;
        every code execution runs on them (the elastic mode with that many
        cores, else the largest below).
    max_trajectories
        The global semaphore: most trajectories admitted at once. A trajectory
        is admitted (first come, first fitting) when its node has ``cores``
        unreserved cores; its actions wait until then.
    replicas
        (task, model) -> dedicated GPU blocks (see :func:`partition_gpus`); a
        (task, model) without replicas runs first come first served on any GPU.
    min_epoch_interval_s
        Least time between two placements, as for the live runtime's epochs.
    """

    def __init__(self, fleet, executor, clock, journal=None, cores: int = 1, max_trajectories: int = 1 << 30,
                 replicas: Mapping[GpuKey, list[tuple[str, ...]]] | None = None,
                 min_epoch_interval_s: float = 0.0) -> None:
        super().__init__(fleet, executor, clock, journal, cores=cores, gpus=1,
                         min_epoch_interval_s=min_epoch_interval_s)
        self.cores, self.max_trajectories = cores, max_trajectories
        self.replicas = {k: list(v) for k, v in (replicas or {}).items()}
        self.unreserved = {n.id: n.cores for n in fleet.nodes}
        self.admitted: set[str] = set()
        self.waiting: list[str] = []  # opened, not yet admitted, in arrival order
        self.task_of: dict[str, str] = {}
        now = clock.now()
        for (task, model), blocks in sorted(self.replicas.items()):
            for b in blocks:
                self.journal.append("hold", now, holder=f"replica:{task}:{model}:{'+'.join(b)}", gpus=list(b))

    @classmethod
    def factory(cls, cores: int = 1, max_trajectories: int = 1 << 30,
                replicas: Mapping[GpuKey, list[tuple[str, ...]]] | None = None, min_epoch_interval_s: float = 0.0):
        """A :data:`~tangram.runtime.controller.PolicyFactory`."""
        return lambda fleet, executor, clock, journal: cls(fleet, executor, clock, journal, cores,
                                                           max_trajectories, replicas, min_epoch_interval_s)

    @staticmethod
    def bindable(fleet: Fleet, cores: int) -> int:
        """How many trajectories the nodes can bind at once: the semaphore under which none waits."""
        return sum(n.cores // cores for n in fleet.nodes)

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> Sandbox | None:
        """Place the sandbox and queue the trajectory for admission.

        A trajectory that asks for no sandbox memory (a search agent) needs no
        sandbox: it binds no cores and does not count against the semaphore.
        """
        sb = super().open_trajectory(trajectory_id, memory_gb)
        if memory_gb > 0:
            self.waiting.append(trajectory_id)
            self._admit()
        return sb

    def close_trajectory(self, trajectory_id: str) -> None:
        sb = self.sandboxes.get(trajectory_id)
        if trajectory_id in self.admitted:
            self.admitted.discard(trajectory_id)
            self.unreserved[sb.node] += self.cores
            self.journal.append("release", self.clock.now(), holder=f"sandbox:{trajectory_id}")
        elif trajectory_id in self.waiting:
            self.waiting.remove(trajectory_id)
        self.queues.pop(("cpu", trajectory_id), None)
        super().close_trajectory(trajectory_id)
        self._admit()

    def _admit(self) -> None:
        """Admit waiting trajectories, first come first fitting, up to the semaphore."""
        for tid in list(self.waiting):
            if len(self.admitted) >= self.max_trajectories:
                return
            node = self.sandboxes[tid].node
            if self.unreserved[node] >= self.cores:
                self.waiting.remove(tid)
                self.admitted.add(tid)
                self.unreserved[node] -= self.cores
                self.journal.append("hold", self.clock.now(), holder=f"sandbox:{tid}", node=node, cores=self.cores)

    def queue_key(self, action: Action) -> Any:
        if action.kind == "cpu":
            return ("cpu", action.trajectory)  # one trajectory's calls never wait for another's
        if action.kind == "gpu":
            return ("gpu", action.task, action.model)
        return action.kind

    def _place(self, a: Action, now: float) -> Assignment | None:
        if a.kind == "cpu":
            if a.trajectory not in self.admitted and (a.trajectory in self.waiting or a.trajectory not in self.sandboxes
                                                       or self.sandboxes[a.trajectory].memory_gb > 0):
                return None  # waits for its sandbox's cores
            return super()._place(a, now)  # fixed degree on its sandbox's node, within the held cores
        if a.kind == "gpu" and (a.task, a.model) in self.replicas:
            return _on_blocks(self, a, now, self.replicas[(a.task, a.model)])
        return super()._place(a, now)


def replicas_of(fleet: Fleet, gpus_of_task: Mapping[str, tuple[str, ...]]) -> dict[GpuKey, list[tuple[str, ...]]]:
    """Dedicated replicas from a task -> GPUs table: every model of the fleet gets, on
    each task's GPUs, the aligned blocks of its smallest degree that fit it."""
    models, gpus = fleet.models, {g.id: g for g in fleet.gpus}
    topo = Topology(fleet.instance())
    out: dict[GpuKey, list[tuple[str, ...]]] = {}
    for task, mine in gpus_of_task.items():
        for m in models:
            degree = min(p.gpus for p in m.parallelism)
            out[(task, m.id)] = [b for b in topo.gpu_blocks(degree) if set(b) <= set(mine)
                                 and all(gpus[g].memory_gb >= m.memory_gb and
                                         (not m.gpu_types or gpus[g].type in m.gpu_types) for g in b)]
    return out


# --------------------------------------------------------------------------- task-isolated


class TaskIsolatedPolicy(SharedFifoPolicy):
    """Task-isolated pools: per task a fixed share of cores on every node and dedicated GPUs.

    Parameters
    ----------
    core_share
        task -> node -> cores the task may use there (see :func:`split_cores`).
    gpu_share
        (task, model) -> the task's GPU blocks for that model (see :func:`partition_gpus`).
    cores
        Fixed degree of code executions.
    """

    def __init__(self, fleet, executor, clock, journal=None, core_share: Mapping[str, Mapping[str, int]] = (),
                 gpu_share: Mapping[GpuKey, list[tuple[str, ...]]] | None = None, cores: int = 1) -> None:
        super().__init__(fleet, executor, clock, journal, cores=cores, gpus=1)
        self.free = {t: dict(v) for t, v in dict(core_share).items()}
        self.share = {t: dict(v) for t, v in dict(core_share).items()}
        self.gpu_share = {k: list(v) for k, v in (gpu_share or {}).items()}
        now = clock.now()
        for task, nodes in sorted(self.free.items()):
            for node, c in sorted(nodes.items()):
                self.journal.append("hold", now, holder=f"share:{task}:{node}", node=node, cores=c)
        for (task, model), blocks in sorted(self.gpu_share.items()):
            for b in blocks:
                self.journal.append("hold", now, holder=f"share:{task}:{model}:{'+'.join(b)}", gpus=list(b))

    @classmethod
    def factory(cls, core_share: Mapping[str, Mapping[str, int]],
                gpu_share: Mapping[GpuKey, list[tuple[str, ...]]], cores: int = 1):
        return lambda fleet, executor, clock, journal: cls(fleet, executor, clock, journal, core_share,
                                                           gpu_share, cores)

    def queue_key(self, action: Action) -> Any:
        return (action.task, action.kind, action.model)

    def _mode_order(self, a: Action, modes) -> list[int]:
        """The fixed degree, capped by the task's share on the sandbox's node (a share smaller
        than the degree would otherwise never run anything)."""
        if a.kind != "cpu" or a.trajectory not in self.sandboxes:
            return super()._mode_order(a, modes)
        cap = min(self.degree["cpu"], self.share.get(a.task, {}).get(self.sandboxes[a.trajectory].node, 0))
        below = [k for k, m in enumerate(modes) if m.cores <= cap]
        return [max(below, key=lambda k: modes[k].cores)] if below else super()._mode_order(a, modes)

    def _place(self, a: Action, now: float) -> Assignment | None:
        if a.kind == "gpu":
            return _on_blocks(self, a, now, self.gpu_share.get((a.task, a.model), ()))
        asg = super()._place(a, now)
        if asg is None or a.kind != "cpu":
            return asg
        free = self.free.get(a.task, {})
        if free.get(asg.placement.node, 0) < asg.placement.cores:
            return None
        free[asg.placement.node] -= asg.placement.cores  # the head that places is dispatched right away
        return asg

    def complete(self, action_id: str, outcome: ActionOutcome) -> None:
        job = self.running.get(action_id)
        if job is not None and job.action.kind == "cpu":
            self.free[job.action.task][job.assignment.placement.node] += job.assignment.placement.cores
        super().complete(action_id, outcome)


# --------------------------------------------------------------------------- common to both policies


def _on_blocks(policy: SharedFifoPolicy, a: Action, now: float, blocks) -> Assignment | None:
    """The first free block of ``blocks`` (all of one degree) for ``a``, at the mode with that degree."""
    modes = expand_modes(a, policy.models)
    gpus = {g.id: g for g in policy.fleet.gpus}
    for b in blocks:
        if policy.ledger.gpus_busy.isdisjoint(b):
            k = next(k for k, m in enumerate(modes) if m.gpus == len(b))
            speed = min(gpus[g].speed for g in b)
            return Assignment(action=a.id, start_s=now, end_s=now + modes[k].duration_s / speed, mode=k,
                              placement=Placement(gpus=tuple(b)))
    return None
