"""The solver-independent checker: feasibility and objective of a schedule.

Plain Python over ids and seconds; imports no solver and no compiled form, so a
schedule from any source (a backend, a file, the runtime's journal) is judged
by the same rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

import numpy as np

from tangram.model.instance import Action, Instance, InstanceIndex, Mode
from tangram.model.schedule import Assignment, Metrics
from tangram.topology.graph import Topology

EPS = 1e-6


def _modes(inst: Instance, a: Action) -> tuple[Mode, ...]:
    from tangram.model.compiled import expand_modes  # pure function; no solver

    return expand_modes(a, {m.id: m for m in inst.models})


def _index(inst: Instance) -> InstanceIndex:
    """The instance's id maps, built once per instance (instances are immutable)."""
    cached = _INDEX.get(id(inst))
    if cached is None or cached[0] is not inst:
        cached = _INDEX[id(inst)] = (inst, inst.index())
        if len(_INDEX) > 64:
            _INDEX.pop(next(iter(_INDEX)))
    return cached[1]


_INDEX: dict[int, tuple[Instance, InstanceIndex]] = {}


def required_duration(inst: Instance, a: Action, mode: Mode, asg: Assignment, topo: Topology) -> float:
    """The time an action needs in a mode and placement, seconds."""
    if not mode.gpus:
        return mode.duration_s
    ix = _index(inst)
    gpus = [ix.gpus[g] for g in asg.placement.gpus if g in ix.gpus]
    seconds = mode.duration_s / min((g.speed for g in gpus), default=1.0)
    if a.sandbox and gpus:
        home = ix.nodes[ix.sandboxes[a.sandbox].node]
        seconds += topo.transfer_s(home.machine_id, gpus[0].machine, a.input_mb)
    return seconds


def hosting(inst: Instance, schedule: Iterable[Assignment]) -> dict[str, set[str]]:
    """GPU id -> models a schedule (plus the running actions) keeps on it."""
    ix = _index(inst)
    out: dict[str, set[str]] = defaultdict(set)
    for asg in schedule:
        a = ix.actions.get(asg.action)
        if a is not None and a.model:
            for g in asg.placement.gpus:
                out[g].add(a.model)
    for r in inst.running:
        if r.model:
            for g in r.gpus:
                out[g].add(r.model)
    return out


def violations(inst: Instance, schedule: Iterable[Assignment]) -> list[str]:
    """Every broken rule, as readable messages; empty when the schedule is feasible."""
    return list(_violations(inst, list(schedule)))


def _violations(inst: Instance, schedule: list[Assignment]) -> Iterator[str]:  # noqa: C901
    ix, c, topo = _index(inst), inst.constraints, Topology.of(inst)
    by_action: dict[str, Assignment] = {}
    for asg in schedule:
        if asg.action in by_action:
            yield f"{asg.action}: scheduled twice"
        by_action[asg.action] = asg
    for a in inst.actions:
        if a.id not in by_action:
            yield f"{a.id}: not scheduled"
    for aid in by_action.keys() - ix.actions.keys():
        yield f"{aid}: not an action of the instance"

    running_end = {r.action: r.end_s for r in inst.running}
    running_models = _running_models(inst)
    load_ready: dict[tuple[str, str], float] = {}
    host = hosting(inst, schedule)
    if c.model_residency:
        for g, models in host.items():
            resident = set(inst.resident.get(g, ())) | running_models.get(g, set())
            mem = sum(ix.models[m].memory_gb for m in models)
            if g in ix.gpus and mem > ix.gpus[g].memory_gb + EPS:
                yield f"gpu {g}: hosts {sorted(models)} needing {mem:g} GiB > {ix.gpus[g].memory_gb:g}"
            for m in models - resident:
                load_ready[(m, g)] = inst.now_s + ix.models[m].load_s

    usage: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for a in inst.actions:
        asg = by_action.get(a.id)
        if asg is None:
            continue
        yield from _action_violations(inst, ix, c, topo, a, asg, by_action, running_end, load_ready, usage)
    for r in inst.running:
        for key, units in _demands(r.node, r.cores, r.memory_gb, r.gpus, r.quota, r.renewable):
            usage[key].append((inst.now_s, r.end_s, units))
        if r.quota and c.quota_rate:
            q = ix.quotas[r.quota]
            if q.calls_per_window:
                usage[("rate", r.quota)].append((inst.now_s, inst.now_s + q.window_s, 1))

    caps = _capacities(inst)
    for key, intervals in usage.items():
        cap = caps.get(key)
        if cap is None:
            continue
        peak, when = _peak(intervals)
        if peak > cap + EPS:
            yield f"{key[0]} {key[1]}: {peak:g} in use at t={when:g}s > capacity {cap:g}"


def _action_violations(inst, ix, c, topo, a, asg, by_action, running_end, load_ready, usage):  # noqa: C901
    modes = _modes(inst, a)
    if asg.mode >= len(modes):
        yield f"{a.id}: mode {asg.mode} does not exist ({len(modes)} modes)"
        return
    m, p = modes[asg.mode], asg.placement
    if asg.start_s < max(a.release_s, inst.now_s) - EPS:
        yield f"{a.id}: starts at {asg.start_s:g}s before its release {max(a.release_s, inst.now_s):g}s"
    need = required_duration(inst, a, m, asg, topo)
    if asg.end_s - asg.start_s < need - EPS:
        yield f"{a.id}: runs {asg.end_s - asg.start_s:g}s < required {need:g}s"
    if c.deadlines and a.deadline_s is not None and asg.end_s > a.deadline_s + EPS:
        yield f"{a.id}: ends at {asg.end_s:g}s after its deadline {a.deadline_s:g}s"
    if m.cores:
        if p.node not in ix.nodes:
            yield f"{a.id}: needs a cpu node, placed on {p.node!r}"
        elif c.affinity and a.sandbox and ix.sandboxes[a.sandbox].node != p.node:
            yield f"{a.id}: must run on its sandbox's node {ix.sandboxes[a.sandbox].node!r}, not {p.node!r}"
        if p.cores != m.cores:
            yield f"{a.id}: mode {asg.mode} grants {m.cores} cores, placement says {p.cores}"
    if len(p.gpus) != m.gpus or len(set(p.gpus)) != len(p.gpus):
        yield f"{a.id}: needs {m.gpus} distinct gpus, got {list(p.gpus)}"
    gpus = [ix.gpus[g] for g in p.gpus if g in ix.gpus]
    if len(gpus) != len(p.gpus):
        yield f"{a.id}: unknown gpu in {list(p.gpus)}"
    if gpus:
        rm = ix.models[a.model]
        if len({g.type for g in gpus}) > 1:
            yield f"{a.id}: gpus of mixed types {sorted({g.type for g in gpus})}"
        if m.gpu_type and gpus[0].type != m.gpu_type or rm.gpu_types and gpus[0].type not in rm.gpu_types:
            yield f"{a.id}: gpu type {gpus[0].type} not allowed"
        if c.nvlink_gang and len({g.domain_id for g in gpus}) > 1:
            yield f"{a.id}: multi-gpu mode spans NVLink domains {sorted({g.domain_id for g in gpus})}"
        for g in p.gpus:
            ready = load_ready.get((a.model, g))
            if ready is not None and asg.start_s < ready - EPS:
                yield f"{a.id}: starts at {asg.start_s:g}s before model {a.model} is loaded on {g} ({ready:g}s)"
    if (p.quota or None) != (m.quota or None):
        yield f"{a.id}: mode uses quota {m.quota!r}, placement says {p.quota!r}"
    if c.precedence:
        for lag in a.after:
            pred_end = running_end.get(lag.action)
            if pred_end is None and lag.action in by_action:
                pred_end = by_action[lag.action].end_s
            if pred_end is not None and asg.start_s < pred_end + lag.lag_s - EPS:
                yield f"{a.id}: starts at {asg.start_s:g}s before {lag.action} ends + lag ({pred_end + lag.lag_s:g}s)"
    memory = m.memory_gb if c.memory else 0.0
    for key, units in _demands(p.node if m.cores else None, m.cores, memory, p.gpus, m.quota, m.renewable):
        usage[key].append((asg.start_s, asg.end_s, units))
    if m.quota and c.quota_rate:
        q = ix.quotas[m.quota]
        if q.calls_per_window:  # a call holds a rate token for one window (see docs/model.md)
            usage[("rate", m.quota)].append((asg.start_s, asg.start_s + q.window_s, 1))


def _running_models(inst: Instance) -> dict[str, set[str]]:
    """GPU id -> models that running actions hold there (loaded, by definition)."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in inst.running:
        if r.model:
            for g in r.gpus:
                out[g].add(r.model)
    return out


def _demands(node, cores, memory_gb, gpus, quota, renewable):
    if node is not None:
        if cores:
            yield ("cores", node), cores
        if memory_gb:
            yield ("memory", node), memory_gb
    for g in gpus:
        yield ("gpu", g), 1
    if quota:
        yield ("quota", quota), 1
    for r, u in renewable.items():
        if u:
            yield ("renewable", r), u


def _capacities(inst: Instance) -> dict[tuple[str, str], float]:
    caps: dict[tuple[str, str], float] = {}
    reserved: dict[str, float] = defaultdict(float)
    for s in inst.sandboxes:
        reserved[s.node] += s.memory_gb
    for n in inst.nodes:
        caps[("cores", n.id)] = n.cores
        if inst.constraints.memory and n.memory_gb > 0:
            caps[("memory", n.id)] = n.memory_gb - reserved[n.id]
    for g in inst.gpus:
        caps[("gpu", g.id)] = 1
    for q in inst.quotas:
        caps[("quota", q.id)] = q.concurrency
        if q.calls_per_window:
            caps[("rate", q.id)] = q.calls_per_window
    for r in inst.renewables:
        caps[("renewable", r.id)] = r.capacity
    return caps


def _peak(intervals: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Largest total demand over half-open intervals [start, end), and when."""
    events = sorted([(s, u) for s, e, u in intervals if e > s + EPS] + [(e, -u) for s, e, u in intervals if e > s + EPS])
    level = peak = 0.0
    when = 0.0
    for t, du in events:  # ends sort before starts at equal times (negative first)
        level += du
        if level > peak:
            peak, when = level, t
    return peak, when


# ----------------------------------------------------------------------------- objective


def metrics(inst: Instance, schedule: Iterable[Assignment]) -> Metrics:
    """Quality of a schedule, in seconds."""
    schedule = list(schedule)
    ix = _index(inst)
    acts = [ix.actions[s.action] for s in schedule if s.action in ix.actions]
    act = np.array([s.end_s - a.release_s for s, a in zip(schedule, acts, strict=True)]) if acts else np.zeros(1)
    p50, p99 = np.quantile(act, [0.5, 0.99])
    makespan = max([s.end_s for s in schedule] + [inst.now_s]) - inst.now_s
    host = hosting(inst, schedule)
    running_models = _running_models(inst)
    load = sum(ix.models[m].load_s for g, ms in host.items()
               for m in ms - set(inst.resident.get(g, ())) - running_models.get(g, set()))
    gpu_eq = inst.objective.gpu_core_equivalent
    held = sum((s.end_s - s.start_s) * (s.placement.cores + gpu_eq * len(s.placement.gpus)) for s in schedule)
    return Metrics(
        mean_act_s=float(act.mean()),
        p50_act_s=float(p50),
        p99_act_s=float(p99),
        makespan_s=float(makespan),
        model_load_s=float(load),
        resource_seconds=float(held),
        max_task_slowdown=_max_task_slowdown(inst, schedule),
    )


def shortest_duration(inst: Instance, a: Action) -> float:
    """Best-case duration of an action over its modes (fastest GPU), seconds.

    Closed forms per mode source, so no modes are built: Amdahl is shortest at the
    most cores, a reward model at its largest speedup on the fastest GPU.
    """
    if a.elastic is not None:
        return a.elastic.duration(max(a.elastic.cores))
    fastest = _fastest_gpu(inst)
    if a.work_s is not None:
        return a.work_s / max(p.speedup for p in _index(inst).models[a.model].parallelism) / fastest
    return min(m.duration_s / (fastest if m.gpus else 1.0) for m in a.modes)


def _fastest_gpu(inst: Instance) -> float:
    ix = _index(inst)
    if ix.fastest_gpu is None:
        ix.fastest_gpu = max((g.speed for g in inst.gpus), default=1.0)
    return ix.fastest_gpu


def slowdown_weights(inst: Instance) -> dict[str, list[tuple[int, float]]]:
    """Task -> [(action index, weight)] such that the task's mean slowdown is
    Σ weight·(end − release): weight = 1 / (number of timed actions of the task ·
    shortest duration). Zero-duration actions (e.g. PSPLIB's dummy jobs) have no
    slowdown and are left out. Every backend builds its fairness term from this."""
    shortest = {i: shortest_duration(inst, a) for i, a in enumerate(inst.actions)}
    members: dict[str, list[int]] = defaultdict(list)
    for i, a in enumerate(inst.actions):
        if shortest[i] > 0:
            members[a.task].append(i)
    return {t: [(i, 1.0 / (len(ix) * shortest[i])) for i in ix] for t, ix in members.items()}


def _max_task_slowdown(inst: Instance, schedule: list[Assignment]) -> float:
    end = {s.action: s.end_s for s in schedule}
    acts = inst.actions
    return max((sum(w * (end[acts[i].id] - acts[i].release_s) for i, w in rows if acts[i].id in end)
                for rows in slowdown_weights(inst).values()), default=0.0)


def evaluate(inst: Instance, schedule: Iterable[Assignment]) -> float:
    """The objective of a schedule: the weighted sum of the instance's terms."""
    schedule = list(schedule)
    ix, o = _index(inst), inst.objective
    value = 0.0
    if o.weighted_act:
        value += o.weighted_act * sum(ix.actions[s.action].weight * (s.end_s - ix.actions[s.action].release_s)
                                      for s in schedule)
    if o.makespan or o.model_load or o.resource_seconds or o.fairness:
        mt = metrics(inst, schedule)
        value += o.makespan * mt.makespan_s + o.model_load * mt.model_load_s
        value += o.resource_seconds * mt.resource_seconds + o.fairness * mt.max_task_slowdown
    return value
