"""The greedy elastic scheduler: fast, always feasible, the fallback and warm start.

1. Order actions weighted-shortest-first (smallest shortest-duration / weight),
   releasing an action only once its predecessors are placed.
2. Place each on the option with the earliest completion: CPU actions in their
   fewest-core mode (so queued work is not starved); GPU actions over every
   aligned block of every degree, except that while other models have actions
   to place, larger degrees only use GPUs that already host the model in this
   plan (fresh GPUs claimed for one action's speed would lock those models out),
   and no claim may leave another waiting model without room; ties to the
   resident model.
3. Water-fill: give leftover cores to placed actions with the largest weighted
   marginal speedup, as long as the extra cores are free for the whole
   (shorter) run; then grow GPU actions into the larger aligned block around
   their GPUs where the rest of it has nothing planned. A shorter run only frees
   time, so this never delays others.

Cores, memory, quotas, rates and renewables are step-function profiles
(backfilling allowed); GPUs are filled in list order, tracked by their free time.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from tangram.model.compiled import NONE, Compiled, Option, OptionGroup
from tangram.model.schedule import SolveStatus
from tangram.solver.base import Outcome, Plan
from tangram.solver.config import SolveConfig
from tangram.solver.profile import Profile

_NEVER = np.iinfo(np.int64).max


class _Stuck(Exception):
    """List scheduling painted itself into a corner (GPU memory taken by other models)."""


class GreedyBackend:
    name = "greedy"
    exact = False

    def is_installed(self) -> bool:
        return True

    def solve(self, compiled: Compiled, config: SolveConfig, initial: Plan | None = None) -> Outcome:
        t0 = time.perf_counter()
        state = ListScheduler(compiled, config)
        try:
            missed = state.place_all()
        except _Stuck as stuck:
            return Outcome(SolveStatus.NO_SOLUTION_IN_TIME, message=str(stuck))
        if config.elastic:
            state.water_fill()
        plan = Plan(state.choice)
        stats = {"runtime_s": time.perf_counter() - t0, "upgrades": state.upgrades}
        if missed:
            return Outcome(SolveStatus.NO_SOLUTION_IN_TIME, plan=None,
                           message=f"greedy missed the deadline of {len(missed)} actions, e.g. "
                           f"{compiled.action_ids[missed[0]]}", stats=stats)
        return Outcome(SolveStatus.FEASIBLE, plan=plan, stats=stats)


class ListScheduler:
    """Resource state of list scheduling: profiles, GPU free times, hosted models."""

    def __init__(self, c: Compiled, config: SolveConfig) -> None:
        self.c, self.config = c, config
        self.cores = [Profile(int(k)) for k in c.node_cores]
        self.memory = [Profile(float(m)) for m in c.node_memory] if c.memory_checked else None
        self.quota = [Profile(int(k)) for k in c.quota_concurrency]
        self.rate = [Profile(r[0]) if r else None for r in c.quota_rate]
        self.renewable = [Profile(int(k)) for k in c.renewable_capacity]
        self.gpu_free = np.zeros(len(c.gpu_ids), dtype=np.int64)
        residency = c.instance.constraints.model_residency
        self.residency = residency
        self.used = np.zeros((len(c.model_ids), len(c.gpu_ids)), dtype=bool)
        self.gpu_mem_used = np.zeros(len(c.gpu_ids))
        # Unplaced GPU actions per model: claiming GPUs must leave each of these models some room.
        self.unplaced = np.zeros(len(c.model_ids), dtype=np.int64)
        for a in c.instance.actions:
            if a.kind == "gpu":
                self.unplaced[c.model_of[a.model]] += 1
        for b in c.busy:
            self._occupy(b, 0, b.end)
            if b.gpus:
                self.gpu_free[list(b.gpus)] = np.maximum(self.gpu_free[list(b.gpus)], b.end)
            if b.model != NONE:
                self._host(b.model, b.gpus)
        self.choice: list[tuple[int, int]] = [(0, 0)] * c.num_actions
        self.chosen: list[Option | None] = [None] * c.num_actions  # the option behind each choice
        self.upgrades = 0
        self._block_arrays: dict[tuple[int, ...], np.ndarray] = {}

    # ------------------------------------------------------------------ phase 1

    def place_all(self) -> list[int]:
        """Place every action in priority order; return those that miss their deadline."""
        c = self.c
        ends = [0] * c.num_actions
        missed = []
        for i in c.priority_order():
            release = max([int(c.release[i])] + [ends[p] + lag for p, lag in c.preds[i]])
            k, start = self._best(i, release)
            if k is None:
                missed.append(i)
                k, start = self._best(i, release, ignore_deadline=True)
                if k is None:
                    raise _Stuck(f"greedy found no placement for {c.action_ids[i]}: the GPUs that could host "
                                 "its model are full of the models it placed before")
            ends[i] = start + self._commit(i, k, start).duration
            if c.instance.actions[i].kind == "gpu":
                self.unplaced[c.model_of[c.instance.actions[i].model]] -= 1
        return missed

    def earliest_completion(self, i: int, release: int) -> int | None:
        """The earliest end of action ``i`` over all its options, given only what is placed."""
        k, start = self._best(i, release, ignore_deadline=True, all_modes=True)
        return None if k is None else start + self.c.option(i, k).duration

    def _best(self, i: int, release: int, ignore_deadline: bool = False,
              all_modes: bool = False) -> tuple[int | None, int]:
        """(option index, start) with the earliest completion, or (None, 0) if none meets the deadline."""
        groups = self.c.groups(i)
        deadline = NONE if ignore_deadline else int(self.c.deadline[i])
        min_cores = min((g.cores for g in groups if g.cores), default=0)
        min_gpus = min((g.blocks.shape[1] for g in groups if g.blocks is not None and len(g.blocks)), default=0)
        contended = min_gpus and self._others_waiting(groups[0].model)
        best, best_key = (None, 0), None
        for g in groups:
            if g.blocks is not None:
                # While other models wait, more GPUs than the fewest only where the model is already
                # hosted in this plan: fresh GPUs claimed for one action's speed lock them out.
                found = self._best_gpu(g, release, claim=all_modes or not contended or g.blocks.shape[1] == min_gpus,
                                       guard=not all_modes)
            elif g.cores and g.cores != min_cores and not all_modes:
                continue  # phase 1 uses the fewest cores; water-filling adds more
            else:
                found = self._best_placement(g, release)
            if found is None:
                continue
            k, start, key = found
            if (deadline == NONE or key[0] <= deadline) and (best_key is None or key < best_key):
                best, best_key = (g.offset + k, start), key
        return best

    def _best_placement(self, g: OptionGroup, release: int):
        """Earliest completion over the nodes of a CPU mode (or the single placement of others)."""
        best = None
        for k in range(len(g.durations)):
            o = g.option(k)
            start = self._fit(o, release)
            if best is None or start + o.duration < best[2][0]:
                best = (k, start, (start + o.duration, 0, o.cores))
                if start == release:
                    break  # nothing completes earlier: durations are equal across nodes
        return best

    def _fit(self, o: Option, start: int) -> int:
        profiles = list(self._profiles(o))
        while True:
            moved = start
            for profile, duration, demand in profiles:
                moved = profile.earliest(moved, duration, demand)
            if moved == start:
                return start
            start = moved

    def _profiles(self, o: Option):
        if o.node != NONE:
            yield self.cores[o.node], o.duration, o.cores
            if self.memory is not None and o.memory_gb:
                yield self.memory[o.node], o.duration, o.memory_gb
        if o.quota != NONE:
            yield self.quota[o.quota], o.duration, 1
            rate = self.c.quota_rate[o.quota]
            if rate:
                yield self.rate[o.quota], rate[1], 1
        for r, units in o.renewable:
            yield self.renewable[r], o.duration, units

    def _best_gpu(self, g: OptionGroup, release: int, claim: bool = True, guard: bool = True):
        """Earliest completion over the aligned blocks of one GPU mode (vectorised).

        Per GPU first (when it is free, when the model would be loaded on it, whether
        the model fits its memory), then one reduction per block. Without ``claim``,
        only GPUs that already host the model in this plan are eligible; with
        ``guard``, a block is skipped when hosting the model there would leave another
        model with actions to place no room at all.
        """
        c, blocks = self.c, g.blocks
        if not len(blocks):
            return None
        ready = self.gpu_free
        if self.residency and g.model != NONE:
            used = self.used[g.model]
            needs_load = ~(used | c.resident[g.model])
            ready = np.where(needs_load, np.maximum(ready, c.model_load[g.model]), ready)
            blocked = ~used if not claim else ~(used | (self.gpu_mem_used + c.model_memory[g.model] <= c.gpu_memory + 1e-9))
            ready = np.where(blocked, _NEVER, ready)
        start = np.maximum(ready[blocks].max(axis=1), release)
        end = np.where(start == _NEVER, _NEVER, start + g.durations)
        if self.residency and g.model != NONE and self.config.residency_aware:
            order = np.lexsort((needs_load[blocks].any(axis=1), end))  # tie-break: resident model first
        else:
            order = np.argsort(end, kind="stable")
        for b in (int(b) for b in order):
            if end[b] == _NEVER:
                return None
            if not (claim and guard and self.residency and g.model != NONE) or self._leaves_room(g.model, blocks[b]):
                return b, int(start[b]), (int(end[b]), 0, blocks.shape[1])
        return None

    def _others_waiting(self, model: int) -> bool:
        """Whether GPU actions of another model are still to be placed in this plan."""
        return model != NONE and bool(self.unplaced.sum() - self.unplaced[model] > 0)

    def _leaves_room(self, model: int, block: np.ndarray) -> bool:
        """Whether every other model with actions still to place keeps a block of its
        smallest degree that could host it, once ``model`` is hosted on ``block``."""
        c = self.c
        fresh = [int(x) for x in block if not self.used[model, x]]
        if not fresh:
            return True
        memory = self.gpu_mem_used.copy()
        memory[fresh] += c.model_memory[model]
        for other in np.flatnonzero(self.unplaced):
            if other == model:
                continue
            room = self.used[other] | (memory + c.model_memory[other] <= c.gpu_memory + 1e-9)
            blocks = self._room_blocks(int(other))
            if len(blocks) and not room[blocks].all(axis=1).any():
                return False
        return True

    def _room_blocks(self, model: int) -> np.ndarray:
        """The blocks of a model's smallest degree on GPUs that can hold it at all."""
        cache = self.__dict__.setdefault("_rooms", {})
        if model not in cache:
            degree = min(p.gpus for p in self.c.instance.models[model].parallelism)
            cache[model] = self.c.resources.eligible_blocks(degree, None, model)
        return cache[model]

    def _commit(self, i: int, k: int, start: int) -> Option:
        o = self.c.option(i, k)
        self.choice[i], self.chosen[i] = (k, start), o
        self._occupy(o, start, start + o.duration)
        if o.gpus:
            self.gpu_free[list(o.gpus)] = start + o.duration
            if self.residency and o.model != NONE:
                self._host(o.model, o.gpus)
        return o

    def _occupy(self, o, start: int, end: int) -> None:
        if o.node != NONE:
            self.cores[o.node].add(start, end, o.cores)
            if self.memory is not None and o.memory_gb:
                self.memory[o.node].add(start, end, o.memory_gb)
        if o.quota != NONE:
            self.quota[o.quota].add(start, end, 1)
            rate = self.c.quota_rate[o.quota]
            if rate:
                self.rate[o.quota].add(start, start + rate[1], 1)
        for r, units in o.renewable:
            self.renewable[r].add(start, end, units)

    def _host(self, model: int, gpus) -> None:
        for g in gpus:
            if not self.used[model, g]:
                self.used[model, g] = True
                self.gpu_mem_used[g] += self.c.model_memory[model]

    # ------------------------------------------------------------------ phase 3

    def water_fill(self) -> None:
        """Give leftover cores and GPUs to placed actions (see the module docstring)."""
        self._fill_cores()
        self._fill_gpus()

    def _fill_cores(self) -> None:
        """Upgrade placed CPU actions to more cores while the cores are free."""
        c = self.c
        heap = []
        for i in range(c.num_actions):
            step = self._next_upgrade(i)
            if step:
                heapq.heappush(heap, step)
        while heap:
            _, i, k_new = heapq.heappop(heap)
            _, start = self.choice[i]
            old, new = self.chosen[i], c.option(i, k_new)
            if not self._upgrade_fits(old, new, start):
                continue
            self.cores[old.node].add(start, start + old.duration, -old.cores)
            self.cores[new.node].add(start, start + new.duration, new.cores)
            if self.memory is not None and old.memory_gb:
                self.memory[old.node].add(start, start + old.duration, -old.memory_gb)
                self.memory[new.node].add(start, start + new.duration, new.memory_gb)
            self.choice[i], self.chosen[i] = (k_new, start), new
            self.upgrades += 1
            step = self._next_upgrade(i)
            if step:
                heapq.heappush(heap, step)

    def _fill_gpus(self) -> None:
        """Grow placed GPU actions into the aligned block around their GPUs when the
        rest of it is idle from their start on (nothing else is planned there), the
        model fits those GPUs and any load is done by then. A shorter run only frees
        time, and GPUs with nothing planned lock no other model out of this plan."""
        c = self.c
        for i in sorted(range(c.num_actions), key=lambda i: self.choice[i][1]):
            old, start = self.chosen[i], self.choice[i][1]
            if not old.gpus:
                continue
            for g in sorted((g for g in c.groups(i) if g.blocks is not None and g.blocks.shape[1] > len(old.gpus)),
                            key=lambda g: -g.blocks.shape[1]):
                k = self._grown_block(g, set(old.gpus), start)
                if k is not None and g.durations[k] < old.duration:
                    new = g.option(k)
                    extra = [x for x in new.gpus if x not in old.gpus]
                    self.gpu_free[extra] = start + new.duration
                    if self.residency and new.model != NONE:
                        self._host(new.model, extra)
                    self.choice[i], self.chosen[i] = (g.offset + k, start), new
                    self.upgrades += 1
                    break

    def _grown_block(self, g: OptionGroup, current: set[int], start: int) -> int | None:
        """The block of ``g`` that contains ``current`` and whose other GPUs can join at ``start``."""
        c = self.c
        for k, block in enumerate(g.blocks):
            if not current <= set(block.tolist()):
                continue
            for x in (int(x) for x in block if x not in current):
                if self.gpu_free[x] > start:
                    return None
                if self.residency and g.model != NONE and not self.used[g.model, x]:
                    if self.gpu_mem_used[x] + c.model_memory[g.model] > c.gpu_memory[x] + 1e-9:
                        return None
                    if not c.resident[g.model, x] and start < c.model_load[g.model]:
                        return None
            return k
        return None

    def _next_upgrade(self, i: int):
        """The next larger core count on the same node, keyed by -(weighted gain per core)."""
        c = self.c
        old = self.chosen[i]
        if not old.cores:
            return None
        step = None
        for g in c.groups(i):
            if g.nodes is None or g.cores <= old.cores or (step and g.cores >= step[0]):
                continue
            k = 0 if len(g.nodes) == 1 and g.nodes[0] == old.node else _position(g.nodes, old.node)
            if k is not None and g.durations[k] < old.duration:
                step = (g.cores, g.offset + k, int(g.durations[k]))
        if step is None:
            return None
        cores, k, duration = step
        gain = c.weight[i] * (old.duration - duration) / (cores - old.cores)
        return (-gain, i, k)

    def _upgrade_fits(self, old: Option, new: Option, start: int) -> bool:
        """The extra cores (and memory) are free for the whole shorter run; the old run
        covers [start, start + new.duration), so its own usage is subtracted."""
        end = start + new.duration
        if self.cores[old.node].peak(start, end) - old.cores + new.cores > self.cores[old.node].capacity:
            return False
        if self.memory is not None and new.memory_gb > old.memory_gb:
            memory = self.memory[old.node]
            return memory.peak(start, end) - old.memory_gb + new.memory_gb <= memory.capacity + 1e-9
        return True


def _position(nodes: np.ndarray, node: int) -> int | None:
    hit = np.flatnonzero(nodes == node)
    return int(hit[0]) if len(hit) else None
