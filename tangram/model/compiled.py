"""Compile an :class:`Instance` into the dense integer form the solvers see.

Times become ticks relative to ``instance.now_s`` (durations rounded up, so a
compiled schedule is never shorter than reality), ids become indices, every
action gets its list of :class:`Option` s: one per (mode, placement). Results are
mapped back to ids and seconds in one place, :meth:`Compiled.assignment`.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from tangram.model.instance import Action, Instance, Mode
from tangram.model.schedule import Assignment, Placement
from tangram.topology.graph import Topology

NONE = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What an action holds while it runs, in indices: a node's cores and memory, a
    GPU block, a quota slot, renewable units, the model its GPUs host."""

    node: int = NONE
    cores: int = 0
    memory_gb: float = 0.0
    gpus: tuple[int, ...] = ()
    quota: int = NONE
    renewable: tuple[tuple[int, int], ...] = ()
    model: int = NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class Option(Request):
    """One way to run an action: a mode on a concrete placement."""

    mode: int
    duration: int  # ticks


@dataclass(frozen=True, slots=True)
class OptionGroup:
    """The options of one mode: one request on alternative placements (array form)."""

    mode: int
    offset: int  # index of the first option in ``Compiled.options(i)``
    durations: np.ndarray  # ticks, one per placement
    cores: int = 0
    memory_gb: float = 0.0
    quota: int = NONE
    renewable: tuple[tuple[int, int], ...] = ()
    model: int = NONE
    nodes: np.ndarray | None = None  # node per placement (CPU modes)
    blocks: np.ndarray | None = None  # (placements x gpus) GPU indices (GPU modes)

    def option(self, k: int) -> Option:
        """The k-th placement as an :class:`Option`."""
        return Option(mode=self.mode, duration=int(self.durations[k]),
                      node=int(self.nodes[k]) if self.nodes is not None else NONE,
                      cores=self.cores, memory_gb=self.memory_gb,
                      gpus=tuple(int(g) for g in self.blocks[k]) if self.blocks is not None else (),
                      quota=self.quota, renewable=self.renewable,
                      model=self.model if self.blocks is not None else NONE)

    def options(self) -> list[Option]:
        return [self.option(k) for k in range(len(self.durations))]


@dataclass(frozen=True, slots=True, kw_only=True)
class Busy(Request):
    """Fixed occupancy by a running action, from tick 0 to ``end``."""

    end: int


def expand_modes(action: Action, instance_models: dict) -> tuple[Mode, ...]:
    """The modes of an action, from whichever source it declares."""
    if action.elastic is not None:
        e = action.elastic
        return tuple(Mode(duration_s=e.duration(c), cores=c, memory_gb=e.memory_gb) for c in e.cores)
    if action.work_s is not None:
        model = instance_models[action.model]
        return tuple(Mode(duration_s=action.work_s / p.speedup, gpus=p.gpus) for p in model.parallelism)
    if action.quota is not None:
        return tuple(m if m.quota else m.model_copy(update={"quota": action.quota}) for m in action.modes)
    return action.modes


class CompiledResources:
    """The resource side of the compiled form, shared by every instance built on the
    very same resource tuples at the same tick (the runtime snapshots one fleet every
    epoch). Also caches per-action work that depends only on the action and these
    resources (its modes and GPU placements), keyed by the action object itself."""

    def __init__(self, inst: Instance, tick_s: float) -> None:
        self.tick_s = tick_s
        c = inst.constraints
        self.topology = Topology.of(inst)
        self.node_ids = [n.id for n in inst.nodes]
        self.gpu_ids = [g.id for g in inst.gpus]
        self.quota_ids = [q.id for q in inst.quotas]
        self.renewable_ids = [r.id for r in inst.renewables]
        self.model_ids = [m.id for m in inst.models]
        self.node_of = {k: i for i, k in enumerate(self.node_ids)}
        self.gpu_of = {k: i for i, k in enumerate(self.gpu_ids)}
        self.quota_of = {k: i for i, k in enumerate(self.quota_ids)}
        self.renewable_of = {k: i for i, k in enumerate(self.renewable_ids)}
        self.model_of = {k: i for i, k in enumerate(self.model_ids)}
        self.models = {m.id: m for m in inst.models}
        self.node_cores = np.array([n.cores for n in inst.nodes], dtype=np.int64)
        # A node that declares no memory (0) is uncapped, as in the checker.
        self.node_memory = np.array([n.memory_gb if n.memory_gb > 0 else np.inf for n in inst.nodes])
        self.memory_checked = c.memory and any(n.memory_gb > 0 for n in inst.nodes)
        self.gpu_memory = np.array([g.memory_gb for g in inst.gpus])
        self.gpu_speed = np.array([g.speed for g in inst.gpus])
        self.quota_concurrency = np.array([q.concurrency for q in inst.quotas], dtype=np.int64)
        self.quota_rate = [
            (q.calls_per_window, _ticks(q.window_s, tick_s)) if c.quota_rate and q.calls_per_window else None
            for q in inst.quotas
        ]
        self.renewable_capacity = np.array([r.capacity for r in inst.renewables], dtype=np.int64)
        self.model_memory = np.array([m.memory_gb for m in inst.models])
        self.model_load = np.array([_ticks(m.load_s, tick_s) for m in inst.models], dtype=np.int64)
        self._gpus, self._nvlink = inst.gpus, c.nvlink_gang
        self._blocks: dict[int, np.ndarray] = {}
        self._eligible: dict[tuple, np.ndarray] = {}
        self._paths: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._per_action: dict[int, tuple[Action, dict]] = {}

    @classmethod
    def of(cls, inst: Instance, tick_s: float) -> CompiledResources:
        parts = (inst.nodes, inst.gpus, inst.quotas, inst.renewables, inst.models, inst.links, inst.constraints)
        key = (*map(id, parts), tick_s)
        hit = _RESOURCES.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], parts, strict=True)):
            return hit[1]
        made = cls(inst, tick_s)
        _RESOURCES[key] = (parts, made)
        if len(_RESOURCES) > 16:
            _RESOURCES.pop(next(iter(_RESOURCES)))
        return made

    def memo(self, action: Action) -> dict:
        """A scratch dict for one action object (its modes, its GPU placements)."""
        hit = self._per_action.get(id(action))
        if hit is None or hit[0] is not action:
            if len(self._per_action) > 100_000:
                self._per_action.clear()
            hit = self._per_action[id(action)] = (action, {})
        return hit[1]

    def modes(self, action: Action) -> tuple[Mode, ...]:
        memo = self.memo(action)
        if "modes" not in memo:
            memo["modes"] = expand_modes(action, self.models)
        return memo["modes"]

    def blocks(self, size: int) -> np.ndarray:
        """Aligned GPU blocks of a size, as a (blocks x size) index array."""
        if size not in self._blocks:
            blocks = self.topology.gpu_blocks(size, self._nvlink)
            self._blocks[size] = np.array([[self.gpu_of[g] for g in b] for b in blocks],
                                          dtype=np.int64).reshape(-1, size)
        return self._blocks[size]

    def eligible_blocks(self, size: int, gpu_type: str | None, model: int) -> np.ndarray:
        """Blocks of a size whose GPUs have the type and the memory the model needs."""
        key = (size, gpu_type, model)
        if key not in self._eligible:
            gpus, rm = self._gpus, self.models[self.model_ids[model]]
            rows = [b for b in self.blocks(size)
                    if (not gpu_type or gpus[b[0]].type == gpu_type)
                    and (not rm.gpu_types or gpus[b[0]].type in rm.gpu_types)
                    and all(gpus[g].memory_gb >= rm.memory_gb for g in b)]
            self._eligible[key] = np.array(rows, dtype=np.int64).reshape(-1, size)
        return self._eligible[key]

    def gpu_placements(self, action: Action, j: int, mode: Mode, model: int, home_machine: str | None):
        """(blocks, duration ticks) of GPU mode ``j``: speed of the slowest GPU, plus data transfer."""
        memo = self.memo(action)
        key = ("gpu", j, home_machine)
        if key not in memo:
            blocks = self.eligible_blocks(mode.gpus, mode.gpu_type, model)
            seconds = mode.duration_s / self.gpu_speed[blocks].min(axis=1) if len(blocks) else np.zeros(0)
            if home_machine is not None and action.input_mb > 0 and len(blocks):
                seconds = seconds + self._transfer(home_machine, blocks, action.input_mb)
            memo[key] = (blocks, np.maximum(0, np.ceil(seconds / self.tick_s - 1e-9)).astype(np.int64))
        return memo[key]

    def _transfer(self, source_machine: str, blocks: np.ndarray, megabytes: float) -> np.ndarray:
        """Seconds to move the input to each block's machine (vectorised, cached per source)."""
        key = (source_machine, blocks.shape[1], id(blocks))
        if key not in self._paths:
            machines = [self._gpus[b[0]].machine for b in blocks]
            paths = [self.topology.paths_from(m).get(source_machine) if m != source_machine else None
                     for m in machines]
            self._paths[key] = (np.array([p[0] if p else 0.0 for p in paths]),
                                np.array([p[1] if p else np.inf for p in paths]))
        latency, bandwidth = self._paths[key]
        return np.where(np.isfinite(bandwidth), latency + megabytes * 8e-3 / bandwidth, 0.0)


_RESOURCES: dict[tuple, tuple[tuple, CompiledResources]] = {}


def _ticks(seconds: float, tick_s: float) -> int:
    return max(0, math.ceil(seconds / tick_s - 1e-9))


@dataclass
class Compiled:
    """Dense view of one instance at a given tick length."""

    instance: Instance
    tick_s: float
    topology: Topology = field(init=False)

    def __post_init__(self) -> None:
        inst, ix = self.instance, self.instance.index()
        self.ix = ix
        r = self.resources = CompiledResources.of(inst, self.tick_s)
        self.topology = r.topology
        self.node_ids, self.gpu_ids, self.quota_ids = r.node_ids, r.gpu_ids, r.quota_ids
        self.renewable_ids, self.model_ids = r.renewable_ids, r.model_ids
        self.node_of, self.gpu_of, self.quota_of = r.node_of, r.gpu_of, r.quota_of
        self.renewable_of, self.model_of = r.renewable_of, r.model_of
        self.node_cores, self.memory_checked = r.node_cores, r.memory_checked
        self.gpu_memory, self.gpu_speed = r.gpu_memory, r.gpu_speed
        self.quota_concurrency, self.quota_rate = r.quota_concurrency, r.quota_rate
        self.renewable_capacity, self.model_memory, self.model_load = (
            r.renewable_capacity, r.model_memory, r.model_load)
        self.action_ids = [a.id for a in inst.actions]
        self.task_ids = sorted({a.task for a in inst.actions})
        self.action_of = {k: i for i, k in enumerate(self.action_ids)}
        c = inst.constraints

        # Sandbox memory is reserved for the whole epoch.
        reserved = np.zeros(len(inst.nodes))
        for s in inst.sandboxes:
            reserved[self.node_of[s.node]] += s.memory_gb
        self.node_memory = r.node_memory - reserved
        self.resident = np.zeros((len(inst.models), len(inst.gpus)), dtype=bool)
        for g, models in inst.resident.items():
            for m in models:
                self.resident[self.model_of[m], self.gpu_of[g]] = True
        for run in inst.running:  # a running action's model is on its GPUs by definition
            if run.model:
                for g in run.gpus:
                    self.resident[self.model_of[run.model], self.gpu_of[g]] = True

        # Actions.
        acts = inst.actions
        self.release = np.array([self.ticks_at(a.release_s) for a in acts], dtype=np.int64)
        self.deadline = np.array(
            [self.ticks_at(a.deadline_s, floor=True) if (a.deadline_s is not None and c.deadlines) else NONE
             for a in acts], dtype=np.int64)
        self.weight = np.array([a.weight for a in acts], dtype=float)
        task_of = {t: i for i, t in enumerate(self.task_ids)}
        self.task = np.array([task_of[a.task] for a in acts], dtype=np.int64)
        self.modes = [r.modes(a) for a in acts]
        running_end = {r.action: self.ticks_at(r.end_s) for r in inst.running}
        self.preds: list[list[tuple[int, int]]] = [[] for _ in acts]
        if c.precedence:
            for j, a in enumerate(acts):
                for lag in a.after:
                    if lag.action in running_end:  # the predecessor is running: a release time
                        self.release[j] = max(self.release[j], running_end[lag.action] + self.ticks(lag.lag_s))
                    else:
                        self.preds[j].append((self.action_of[lag.action], self.ticks(lag.lag_s)))

        self.busy = [self._busy(r) for r in inst.running]

    # ------------------------------------------------------------------ time

    def ticks(self, seconds: float) -> int:
        """A duration in ticks, rounded up (never optimistic)."""
        return _ticks(seconds, self.tick_s)

    def ticks_at(self, t_s: float, floor: bool = False) -> int:
        """An absolute time in ticks after ``now_s``; releases round up, deadlines down."""
        x = (t_s - self.instance.now_s) / self.tick_s
        return max(0, math.floor(x + 1e-9) if floor else math.ceil(x - 1e-9))

    def seconds_at(self, tick: int) -> float:
        return self.instance.now_s + tick * self.tick_s

    # ------------------------------------------------------------------ options

    @property
    def num_actions(self) -> int:
        return len(self.action_ids)

    def groups(self, i: int) -> list[OptionGroup]:
        """The options of action ``i`` grouped by mode, as arrays over placements; cached.

        ``options(i)`` is their concatenation, so option index = group.offset + position.
        """
        cache = self.__dict__.setdefault("_groups", {})
        if i not in cache:
            cache[i] = self._enumerate(i)
        return cache[i]

    def options(self, i: int) -> list[Option]:
        """Every (mode, placement) of action ``i`` as objects; cached."""
        cache = self.__dict__.setdefault("_options", {})
        if i not in cache:
            cache[i] = [opt for g in self.groups(i) for opt in g.options()]
        return cache[i]

    def option(self, i: int, index: int) -> Option:
        """Option ``index`` of action ``i``, without building the others."""
        for g in reversed(self.groups(i)):
            if index >= g.offset:
                return g.option(index - g.offset)
        raise IndexError(f"action {self.action_ids[i]}: no option {index}")

    def _enumerate(self, i: int) -> list[OptionGroup]:
        a = self.instance.actions[i]
        c = self.instance.constraints
        model = self.model_of.get(a.model, NONE) if a.model else NONE
        home = self.ix.nodes[self.ix.sandboxes[a.sandbox].node] if a.sandbox is not None else None
        groups, offset = [], 0
        for j, m in enumerate(self.modes[i]):
            memory = m.memory_gb if self.memory_checked else 0.0
            common = dict(mode=j, offset=offset, cores=m.cores, memory_gb=memory,
                          quota=self.quota_of[m.quota] if m.quota else NONE, model=model,
                          renewable=tuple(sorted((self.renewable_of[r], u) for r, u in m.renewable.items() if u)))
            if m.gpus:
                blocks, durations = self.resources.gpu_placements(a, j, m, model, home and home.machine_id)
                group = OptionGroup(durations=durations, blocks=blocks, **common)
            elif m.cores:
                if home is not None and c.affinity:
                    nodes = np.array([self.node_of[home.id]], dtype=np.int64)
                else:
                    nodes = np.arange(len(self.node_ids), dtype=np.int64)
                nodes = nodes[(self.node_cores[nodes] >= m.cores) & (self.node_memory[nodes] + 1e-9 >= memory)]
                group = OptionGroup(durations=np.full(len(nodes), self.ticks(m.duration_s), dtype=np.int64),
                                    nodes=nodes, **common)
            else:
                group = OptionGroup(durations=np.array([self.ticks(m.duration_s)], dtype=np.int64), **common)
            groups.append(group)
            offset += len(group.durations)
        return groups

    def priority_order(self) -> list[int]:
        """Every action after its predecessors, smallest shortest-duration / weight first
        (weighted-shortest-first, the greedy's order and the urgency of windows); cached."""
        cache = self.__dict__.get("_priority_order")
        if cache is None:
            n = self.num_actions
            succ: list[list[int]] = [[] for _ in range(n)]
            waiting = [len(p) for p in self.preds]
            for j, preds in enumerate(self.preds):
                for i, _ in preds:
                    succ[i].append(j)
            key = [self.min_duration(i) / self.weight[i] for i in range(n)]
            ready = [(key[i], i) for i in range(n) if not waiting[i]]
            heapq.heapify(ready)
            cache = []
            while ready:
                _, i = heapq.heappop(ready)
                cache.append(i)
                for j in succ[i]:
                    waiting[j] -= 1
                    if not waiting[j]:
                        heapq.heappush(ready, (key[j], j))
            if len(cache) != n:
                raise ValueError("actions: precedence cycle")  # validated away; kept as an invariant
            self.__dict__["_priority_order"] = cache
        return cache

    def min_duration(self, i: int) -> int:
        """Shortest duration of any option, ticks."""
        return min((int(g.durations.min()) for g in self.groups(i) if len(g.durations)), default=0)

    # ------------------------------------------------------------------ running

    def _busy(self, r) -> Busy:
        return Busy(
            end=self.ticks_at(r.end_s),
            node=self.node_of[r.node] if r.node else NONE,
            cores=r.cores,
            memory_gb=r.memory_gb if self.memory_checked else 0.0,
            gpus=tuple(self.gpu_of[g] for g in r.gpus),
            quota=self.quota_of[r.quota] if r.quota else NONE,
            renewable=tuple(sorted((self.renewable_of[k], u) for k, u in r.renewable.items() if u)),
            model=self.model_of[r.model] if r.model else NONE,
        )

    def pinned_hosting(self) -> set[tuple[int, int]]:
        """(model, gpu) pairs that running actions keep hosted."""
        return {(b.model, g) for b in self.busy if b.model != NONE for g in b.gpus}

    def horizon(self) -> int:
        """A safe upper bound on any end in an optimal schedule, ticks."""
        # An action occupies its resources for its duration, and a rate token for a window.
        longest = sum(max((max(int(g.durations.max()), self.quota_rate[g.quota][1] if g.quota != NONE
                                and self.quota_rate[g.quota] else 0)
                           for g in self.groups(i) if len(g.durations)), default=0)
                      for i in range(self.num_actions))
        lags = sum(lag for ps in self.preds for _, lag in ps)
        fixed = max([b.end for b in self.busy] + [0])
        load = int(self.model_load.max()) if len(self.model_load) else 0
        release = int(self.release.max()) if self.num_actions else 0
        return max(release, fixed) + load + longest + lags + 1

    # ------------------------------------------------------------------ results

    def assignment(self, i: int, option: Option, start: int) -> Assignment:
        """Map one decision back to ids and seconds."""
        placement = Placement(
            node=self.node_ids[option.node] if option.node != NONE else None,
            cores=option.cores,
            gpus=tuple(self.gpu_ids[g] for g in option.gpus),
            quota=self.quota_ids[option.quota] if option.quota != NONE else None,
        )
        return Assignment(action=self.action_ids[i], start_s=self.seconds_at(start),
                          end_s=self.seconds_at(start + option.duration), mode=option.mode, placement=placement)


def compile_instance(instance: Instance, tick_s: float = 0.01) -> Compiled:
    """Compile once; every backend of one solve shares the result."""
    if not (tick_s > 0):
        raise ValueError("tick_s: must be > 0")
    return Compiled(instance, tick_s)
