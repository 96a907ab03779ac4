"""Baselines: static sizing, and the trajectory-bound and task-isolated policies in the simulator."""

from collections import defaultdict
from pathlib import Path

import pytest

from tangram.model.instance import CpuNode, Gpu, Parallelism, RewardModel
from tangram.runtime.controller import Fleet
from tangram.runtime.sim import simulate
from tangram.runtime.sim.baselines import (
    TaskIsolatedPolicy,
    TrajectoryBoundPolicy,
    cpu_demand,
    gpu_demand,
    partition_gpus,
    split_cores,
)
from tangram.workload.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent / "instances" / "scenarios"


@pytest.fixture(scope="module")
def step():
    """The quick scenario with 16 trajectories on its fleet."""
    s = load_scenario(ROOT / "quick.toml").model_copy(update={"batch": 16})
    return s.build_fleet(), s.workload()


def _peak(intervals):
    """Largest sum of values over time of (start, end, value) intervals."""
    ev = sorted([(s, v) for s, e, v in intervals] + [(e, -v) for s, e, v in intervals], key=lambda x: (x[0], x[1]))
    cur = peak = 0
    for _, v in ev:
        cur += v
        peak = max(peak, cur)
    return peak


def test_partition_sizes_replicas_to_demand():
    fleet = Fleet(gpus=tuple(Gpu(id=f"g{i}", type="H100", memory_gb=80, machine=f"m{i // 4}") for i in range(8)),
                  models=(RewardModel(id="a", memory_gb=10, load_s=1),
                          RewardModel(id="b", memory_gb=10, load_s=1, parallelism=(Parallelism(gpus=2, speedup=1.8),))))
    out = partition_gpus(fleet, {("t1", "a"): 1.0, ("t2", "a"): 9.0, ("t3", "b"): 1.0})
    blocks = [g for bs in out.values() for b in bs for g in b]
    assert len(blocks) == len(set(blocks)) == 8  # disjoint, nothing left idle
    assert len(out[("t2", "a")]) > len(out[("t1", "a")]) >= 1
    assert all(len(b) == 2 and b[0][1:].isdigit() for b in out[("t3", "b")])
    with pytest.raises(ValueError, match="no free 2-GPU block"):
        partition_gpus(Fleet(gpus=fleet.gpus[:1], models=fleet.models), {("t", "b"): 1.0})


def test_split_cores_covers_every_node():
    fleet = Fleet(nodes=(CpuNode(id="n0", cores=10), CpuNode(id="n1", cores=3)))
    out = split_cores(fleet, {"a": 0.9, "b": 0.1, "c": 0.0})
    assert set(out) == {"a", "b"}
    for n in fleet.nodes:
        assert out["a"][n.id] + out["b"][n.id] == n.cores and out["b"][n.id] >= 1
    assert out["a"]["n0"] == 9


def test_trajectory_bound_holds_cores_for_life_under_the_semaphore(step):
    fleet, w = step
    replicas = partition_gpus(fleet, gpu_demand(w, fleet))
    run = simulate(w, fleet, TrajectoryBoundPolicy.factory(cores=4, max_trajectories=5, replicas=replicas))
    assert len(run.records) == w.num_actions
    holds, spans = {}, []
    for e in run.events:
        if e["type"] == "hold" and e["holder"].startswith("sandbox:"):
            holds[e["holder"]] = e
        elif e["type"] == "release":
            h = holds.pop(e["holder"])
            spans.append((h["t"], e["t"], 1, h["holder"][8:], h["node"]))
    # coding trajectories hold a sandbox; search agents ask for none and bind nothing
    assert not holds and len(spans) == sum(1 for t in w.trajectories if t.sandbox_memory_gb > 0)
    assert _peak([(s, e, v) for s, e, v, _, _ in spans]) <= 5  # the semaphore
    per_node = defaultdict(list)
    for s, e, _, _, node in spans:
        per_node[node].append((s, e, 4))
    for n in fleet.nodes:
        assert _peak(per_node[n.id]) <= n.cores
    life = {tid: (s, e) for s, e, _, tid, _ in spans}
    mine = {k: {g for b in v for g in b} for k, v in replicas.items()}
    for r in run.records:
        if r.kind == "cpu":
            s, e = life[r.trajectory]
            assert r.cores == 4 and s - 1e-9 <= r.dispatch_s and r.end_s <= e + 1e-9
        if r.kind == "gpu":
            model = next(st.action.model for t in w.trajectories if t.id == r.trajectory for st in t.steps
                         if st.action.kind == "gpu")
            assert set(r.gpus) <= mine[(r.task, model)]


def test_semaphore_and_cores_slow_the_step(step):
    fleet, w = step
    replicas = partition_gpus(fleet, gpu_demand(w, fleet))
    wide = simulate(w, fleet, TrajectoryBoundPolicy.factory(cores=1, replicas=replicas)).records
    narrow = simulate(w, fleet, TrajectoryBoundPolicy.factory(cores=1, max_trajectories=2, replicas=replicas)).records
    assert max(r.end_s for r in narrow) > max(r.end_s for r in wide)


def test_task_isolated_stays_within_each_share(step):
    fleet, w = step
    demand = cpu_demand(w)
    shares = split_cores(fleet, {t: d / sum(demand.values()) for t, d in demand.items()})
    gpu = partition_gpus(fleet, gpu_demand(w, fleet))
    run = simulate(w, fleet, TaskIsolatedPolicy.factory(shares, gpu, cores=8))
    assert len(run.records) == w.num_actions
    use = defaultdict(list)
    for r in run.records:
        if r.kind == "cpu":
            use[(r.task, r.node)].append((r.dispatch_s, r.end_s, r.cores))
            assert r.cores <= min(8, shares[r.task][r.node])
        if r.kind == "gpu":
            assert any(set(r.gpus) == set(b) for (task, _), bs in gpu.items() if task == r.task for b in bs)
    for (task, node), spans in use.items():
        assert _peak(spans) <= shares[task][node]
