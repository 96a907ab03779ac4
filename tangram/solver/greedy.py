"""The greedy elastic scheduler: fast, always feasible, the fallback and warm start.

1. Order actions weighted-shortest-first (smallest shortest-duration / weight),
   releasing an action only once its predecessors are placed.
2. Place each on the option with the earliest completion: CPU actions in their
   fewest-core mode (so queued work is not starved), every GPU degree and every
   aligned GPU block, ties to the resident model, then to fewer GPUs.
3. Water-fill: give leftover cores to placed actions with the largest weighted
   marginal speedup, as long as the extra cores are free for the whole
   (shorter) run. A shorter run only frees time, so this never delays others.

Cores, memory, quotas, rates and renewables are step-function profiles
(backfilling allowed); GPUs are filled in list order, tracked by their free time.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from tangram.model.compiled import NONE, Compiled, Option
from tangram.model.schedule import SolveStatus
from tangram.solver.base import Outcome, Plan
from tangram.solver.config import SolveConfig
from tangram.solver.profile import Profile


class GreedyBackend:
    name = "greedy"
    exact = False

    def is_installed(self) -> bool:
        return True

    def solve(self, compiled: Compiled, config: SolveConfig, initial: Plan | None = None) -> Outcome:
        t0 = time.perf_counter()
        state = _State(compiled, config)
        missed = state.place_all()
        if config.elastic:
            state.water_fill()
        plan = Plan(state.choice)
        stats = {"runtime_s": time.perf_counter() - t0, "upgrades": state.upgrades}
        if missed:
            return Outcome(SolveStatus.NO_SOLUTION_IN_TIME, plan=None,
                           message=f"greedy missed the deadline of {len(missed)} actions, e.g. "
                           f"{compiled.action_ids[missed[0]]}", stats=stats)
        return Outcome(SolveStatus.FEASIBLE, plan=plan, stats=stats)


class _State:
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
        for b in c.busy:
            self._occupy(b, 0, b.end)
            if b.gpus:
                self.gpu_free[list(b.gpus)] = np.maximum(self.gpu_free[list(b.gpus)], b.end)
            if b.model != NONE:
                self._host(b.model, b.gpus)
        self.choice: list[tuple[int, int]] = [(0, 0)] * c.num_actions
        self.upgrades = 0
        self._block_arrays: dict[tuple[int, ...], np.ndarray] = {}

    # ------------------------------------------------------------------ phase 1

    def place_all(self) -> list[int]:
        c = self.c
        n = c.num_actions
        succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        waiting = [len(p) for p in c.preds]
        for j, preds in enumerate(c.preds):
            for i, lag in preds:
                succ[i].append((j, lag))
        earliest = c.release.astype(np.int64).copy()
        priority = [c.min_duration(i) / c.weight[i] for i in range(n)]
        ready = [(priority[i], i) for i in range(n) if not waiting[i]]
        heapq.heapify(ready)
        missed = []
        while ready:
            _, i = heapq.heappop(ready)
            k, start = self._best(i, int(earliest[i]))
            if k is None:
                missed.append(i)
                k, start = self._best(i, int(earliest[i]), ignore_deadline=True)
            self._commit(i, k, start)
            end = start + c.options(i)[k].duration
            for j, lag in succ[i]:
                earliest[j] = max(earliest[j], end + lag)
                waiting[j] -= 1
                if not waiting[j]:
                    heapq.heappush(ready, (priority[j], j))
        if any(waiting):
            raise ValueError("precedence cycle")  # validated away; kept as an invariant
        return missed

    def _best(self, i: int, release: int, ignore_deadline: bool = False) -> tuple[int | None, int]:
        c, opts = self.c, self.c.options(i)
        deadline = NONE if ignore_deadline else int(c.deadline[i])
        min_cores = min((o.cores for o in opts if o.cores), default=0)
        best, best_key = None, None
        gpu_modes: dict[int, list[int]] = {}
        for k, o in enumerate(opts):
            if o.gpus:
                gpu_modes.setdefault(o.mode, []).append(k)
                continue
            if o.cores and o.cores != min_cores:
                continue  # phase 1 uses the fewest cores; water-filling adds more
            start = self._fit(o, release)
            key = (start + o.duration, 0, o.cores)
            if (deadline == NONE or key[0] <= deadline) and (best_key is None or key < best_key):
                best, best_key = (k, start), key
        for ks in gpu_modes.values():
            k, start, key = self._best_gpu(i, ks, release)
            if k is not None and (deadline == NONE or key[0] <= deadline) and (best_key is None or key < best_key):
                best, best_key = (k, start), key
        if best is None:
            return None, 0
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

    def _best_gpu(self, i: int, ks: list[int], release: int):
        """Earliest completion over the aligned blocks of one GPU mode (vectorised)."""
        c, opts = self.c, self.c.options(i)
        key = tuple(ks)
        blocks = self._block_arrays.get(key)
        if blocks is None:
            blocks = self._block_arrays[key] = np.array([opts[k].gpus for k in ks], dtype=np.int64)
        durations = np.fromiter((opts[k].duration for k in ks), dtype=np.int64, count=len(ks))
        start = np.maximum(self.gpu_free[blocks].max(axis=1), release)
        loading = np.zeros(len(ks), dtype=bool)
        model = opts[ks[0]].model
        if self.residency and model != NONE:
            used = self.used[model]
            fits = used | (self.gpu_mem_used + c.model_memory[model] <= c.gpu_memory + 1e-9)
            ok = fits[blocks].all(axis=1)
            needs_load = ~(used | c.resident[model])
            loading = needs_load[blocks].any(axis=1)
            if not self.config.residency_aware:
                loading[:] = False  # ignore residency in the choice; the load is still paid below
            start = np.where(needs_load[blocks].any(axis=1), np.maximum(start, c.model_load[model]), start)
            if not ok.any():
                return None, 0, None
            end = np.where(ok, start + durations, np.iinfo(np.int64).max)
        else:
            end = start + durations
        order = np.lexsort((loading, end))
        b = int(order[0])
        if end[b] == np.iinfo(np.int64).max:
            return None, 0, None
        return ks[b], int(start[b]), (int(end[b]), int(loading[b]), int(blocks.shape[1]))

    def _commit(self, i: int, k: int, start: int) -> None:
        o = self.c.options(i)[k]
        self.choice[i] = (k, start)
        self._occupy(o, start, start + o.duration)
        if o.gpus:
            self.gpu_free[list(o.gpus)] = start + o.duration
            if self.residency and o.model != NONE:
                self._host(o.model, o.gpus)

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
        """Upgrade placed CPU actions to more cores while the cores are free."""
        c = self.c
        heap = []
        for i in range(c.num_actions):
            step = self._next_upgrade(i)
            if step:
                heapq.heappush(heap, step)
        while heap:
            _, i, k_new = heapq.heappop(heap)
            k_old, start = self.choice[i]
            old, new = c.options(i)[k_old], c.options(i)[k_new]
            if not self._upgrade_fits(old, new, start):
                continue
            self.cores[old.node].add(start, start + old.duration, -old.cores)
            self.cores[new.node].add(start, start + new.duration, new.cores)
            if self.memory is not None and old.memory_gb:
                self.memory[old.node].add(start, start + old.duration, -old.memory_gb)
                self.memory[new.node].add(start, start + new.duration, new.memory_gb)
            self.choice[i] = (k_new, start)
            self.upgrades += 1
            step = self._next_upgrade(i)
            if step:
                heapq.heappush(heap, step)

    def _next_upgrade(self, i: int):
        """The next larger core count on the same node, keyed by -(weighted gain per core)."""
        c = self.c
        k_old, _ = self.choice[i]
        opts = c.options(i)
        old = opts[k_old]
        if not old.cores:
            return None
        better = [(o.cores, k) for k, o in enumerate(opts)
                  if o.node == old.node and o.cores > old.cores and o.duration < old.duration]
        if not better:
            return None
        cores, k = min(better)
        gain = c.weight[i] * (old.duration - opts[k].duration) / (cores - old.cores)
        return (-gain, i, k)

    def _upgrade_fits(self, old: Option, new: Option, start: int) -> bool:
        extra = new.cores - old.cores
        cores = self.cores[old.node]
        cores.add(start, start + old.duration, -old.cores)
        ok = cores.earliest(start, new.duration, new.cores) == start
        cores.add(start, start + old.duration, old.cores)
        if ok and self.memory is not None and new.memory_gb > old.memory_gb:
            ok = self.memory[old.node].earliest(start, new.duration, new.memory_gb - old.memory_gb) == start
        return ok and extra > 0
