"""A lower bound on the objective that no backend needs to prove: two relaxations.

1. **Earliest completion.** Every action alone, with only the running actions in
   place: its earliest end over all options (release, predecessors' earliest ends
   plus lags, running occupancy, model load, GPU memory). No schedule ends an
   action earlier.
2. **Fluid pools (mean busy time).** Actions that can only draw on one pool (a
   node, for sandboxed code; the GPUs; one quota) consume at least their minimum
   energy e_j = min over options of units x duration from it. Spreading each
   action's energy evenly over its run, any schedule is a feasible fluid schedule
   whose mean busy times M_j satisfy C_j >= M_j + d_min_j / 2; the preemptive rule
   "largest w_j / e_j first, at the full free capacity" minimises Σ w_j M_j
   (Goemans 1996; capacity may vary over time). So Σ w_j C_j >= Σ w_j (M*_j + d_min_j / 2)
   over the pool, which captures queueing that (1) cannot see.

Per pool the larger of the two sums holds; pools are disjoint sets of actions,
each relaxed to the whole pool's capacity, so their bounds add up. The other
objective terms get their own simple bounds. Everything is for the model
compiled at ``tick_s``, like every backend's bound.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np

from tangram.model.check import slowdown_weights
from tangram.model.compiled import NONE, Compiled
from tangram.solver.config import SolveConfig
from tangram.solver.greedy import ListScheduler


def lower_bound(c: Compiled) -> float | None:
    """A valid lower bound on the objective, or None when some action cannot be placed."""
    inst, o, tick = c.instance, c.instance.objective, c.tick_s
    ends = earliest_completions(c)
    if ends is None:
        return None
    value = 0.0
    if o.weighted_act:
        weighted = sum(c.weight[i] * (inst.now_s - a.release_s) for i, a in enumerate(inst.actions))
        value += o.weighted_act * (weighted + tick * _weighted_completion_bound(c, ends))
    if o.makespan:
        value += o.makespan * tick * max(ends, default=0)
    if o.resource_seconds:
        value += o.resource_seconds * tick * sum(
            min(opt.duration * (opt.cores + o.gpu_core_equivalent * len(opt.gpus)) for opt in _options(c, i))
            for i in range(c.num_actions))
    if o.fairness:
        value += o.fairness * max((sum(w * (inst.now_s + tick * ends[i] - inst.actions[i].release_s)
                                       for i, w in members) for members in slowdown_weights(inst).values()),
                                  default=0.0)
    return value  # model_load >= 0 adds nothing


def earliest_completions(c: Compiled) -> list[int] | None:
    """Per action, the earliest end over all options with only running actions in place (ticks)."""
    state = ListScheduler(c, SolveConfig(tick_s=c.tick_s))
    ends = [0] * c.num_actions
    for i in c.priority_order():
        start = max([int(c.release[i])] + [ends[p] + lag for p, lag in c.preds[i]])
        end = state.earliest_completion(i, start)
        if end is None:
            return None
        ends[i] = end
    return ends


def _weighted_completion_bound(c: Compiled, ends: list[int]) -> float:
    """Σ w_j C_j >= Σ over pools of max(earliest-completion sum, fluid sum), in ticks."""
    pools: dict[tuple, list[int]] = defaultdict(list)
    alone = []
    for i in range(c.num_actions):
        key = _pool(c, i)
        (pools[key] if key else alone).append(i)
    total = sum(c.weight[i] * ends[i] for i in alone)
    for key, members in pools.items():
        starts = [ends[i] - c.min_duration(i) for i in members]  # earliest starts (ticks)
        fluid = _fluid(c, key, members, starts)
        total += max(sum(c.weight[i] * ends[i] for i in members), fluid)
    return total


def _pool(c: Compiled, i: int) -> tuple | None:
    """The one pool every option of action ``i`` draws on, or None."""
    groups = c.groups(i)
    if all(g.blocks is not None for g in groups):
        return ("gpu",)
    if all(g.nodes is not None for g in groups):
        nodes = {int(n) for g in groups for n in g.nodes}
        return ("node", nodes.pop()) if len(nodes) == 1 else None
    quotas = {g.quota for g in groups}
    if all(g.blocks is None and g.nodes is None and not g.renewable for g in groups) and len(quotas) == 1 \
            and NONE not in quotas:
        return ("quota", quotas.pop())
    return None


def _capacity(c: Compiled, key: tuple) -> tuple[list[int], list[float]]:
    """Free capacity of a pool as a step function (change times, levels) given running actions."""
    if key[0] == "node":
        cap, held = float(c.node_cores[key[1]]), [(b.end, b.cores) for b in c.busy if b.node == key[1]]
    elif key[0] == "gpu":
        cap, held = float(len(c.gpu_ids)), [(b.end, len(b.gpus)) for b in c.busy if b.gpus]
    else:
        cap, held = float(c.quota_concurrency[key[1]]), [(b.end, 1) for b in c.busy if b.quota == key[1]]
    times, levels = [0], [cap - sum(u for _, u in held)]
    for end, units in sorted(held):
        if end == times[-1]:
            levels[-1] += units
        else:
            times.append(end)
            levels.append(levels[-1] + units)
    return times, levels


def _energy(c: Compiled, key: tuple, i: int) -> float:
    if key[0] == "node":
        return float(min(o.cores * o.duration for o in _options(c, i)))
    if key[0] == "gpu":
        return float(min(int(g.durations.min()) * g.blocks.shape[1] for g in c.groups(i) if len(g.durations)))
    return float(c.min_duration(i))


def _fluid(c: Compiled, key: tuple, members: list[int], starts: list[int]) -> float:
    """Σ w_j (M*_j + d_min_j / 2) under the preemptive largest-ratio-first fluid schedule."""
    cap_times, cap_levels = _capacity(c, key)
    energy = {i: _energy(c, key, i) for i in members}
    release = dict(zip(members, starts, strict=True))
    remaining = dict(energy)
    moment: dict[int, float] = defaultdict(float)  # Σ energy x midpoint per job
    arrivals = sorted(members, key=lambda i: release[i])
    events = sorted(set(cap_times) | set(release.values()))
    available: list[tuple[float, int]] = []  # (-w/e, job): the largest ratio on top
    t, k, a, e = 0.0, 0, 0, 0
    while a < len(arrivals) or available:
        while a < len(arrivals) and release[arrivals[a]] <= t:
            j = arrivals[a]
            heapq.heappush(available, (-c.weight[j] / energy[j] if energy[j] > 0 else -np.inf, j))
            a += 1
        if not available:
            t = float(release[arrivals[a]])
            continue
        while k + 1 < len(cap_times) and cap_times[k + 1] <= t:
            k += 1
        while e < len(events) and events[e] <= t:
            e += 1
        horizon = events[e] if e < len(events) else np.inf
        level = cap_levels[k]
        if level <= 0:
            t = horizon
            continue
        j = available[0][1]
        stop = min(t + remaining[j] / level, horizon)
        done = (stop - t) * level
        moment[j] += done * (t + stop) / 2
        remaining[j] -= done
        if remaining[j] <= 1e-9 * max(1.0, energy[j]):
            heapq.heappop(available)
        t = stop
    total = 0.0
    for i in members:
        mean = moment[i] / energy[i] if energy[i] > 0 else release[i]
        total += c.weight[i] * (mean + c.min_duration(i) / 2)
    return total


def _options(c: Compiled, i: int):
    """The cheapest option per group (durations vary only across GPU blocks)."""
    for g in c.groups(i):
        if len(g.durations):
            yield g.option(int(np.argmin(g.durations)))
