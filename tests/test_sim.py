"""The discrete-event simulator on tiny workloads, and the run metrics."""

import json

import pytest

from tangram.analysis.runs import ActionRecord, act_summary, makespan, resource_seconds, utilisation
from tangram.model.instance import ApiQuota, CpuNode, Gpu, Parallelism, RewardModel
from tangram.model.schedule import Assignment, Placement
from tangram.runtime.controller import ControllerConfig, EpochReport, Fleet
from tangram.runtime.estimator import OracleEstimator
from tangram.runtime.sim import (
    ActionSpec,
    CapacityError,
    SharedFifoPolicy,
    Step,
    TrajectoryScript,
    Workload,
    simulate,
    tangram_policy,
)
from tangram.runtime.sim.workload import synthetic

FLEET = Fleet(
    nodes=(CpuNode(id="n0", cores=8, memory_gb=32), CpuNode(id="n1", cores=8, memory_gb=32)),
    gpus=tuple(Gpu(id=f"g{i}", type="H100", memory_gb=80, machine="m0") for i in range(2)),
    models=(RewardModel(id="rm", memory_gb=30, load_s=2.0,
                        parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.8))),),
    quotas=(ApiQuota(id="web", concurrency=2, calls_per_window=4, window_s=1.0),),
)


@pytest.fixture(scope="module")
def workload():
    """12 trajectories x 6 steps of code execution, reward scoring and web search."""
    return synthetic(12, steps=6, seed=7, arrival_s=3.0, model="rm", quota="web")


@pytest.fixture(scope="module")
def greedy_run(workload):
    return simulate(workload, FLEET, tangram_policy(ControllerConfig(deterministic=True)))


def test_all_actions_complete_and_act_covers_the_true_duration(workload, greedy_run):
    recs = greedy_run.records
    assert len(recs) == workload.num_actions == len({r.action for r in recs})
    truth = {r.action: r for r in recs}
    for traj in workload.trajectories:
        ends = [truth[f"{traj.id}/{k}"] for k in range(len(traj.steps))]
        for prev, nxt in zip(ends, ends[1:], strict=False):
            assert nxt.release_s >= prev.end_s - 1e-9  # the next call comes after the previous one
    for r in recs:
        assert r.act_s >= r.duration_s + r.load_s - 1e-9
        assert r.release_s <= r.dispatch_s <= r.start_s <= r.end_s


def test_true_duration_follows_the_chosen_mode(workload, greedy_run):
    spec = {f"{t.id}/{k}": s.action for t in workload.trajectories for k, s in enumerate(t.steps)}
    for r in greedy_run.records:
        s = spec[r.action]
        if r.kind == "cpu":
            p = s.parallel_fraction
            assert r.duration_s == pytest.approx(s.true_s * ((1 - p) + p / r.cores), rel=0.05, abs=0.02)
        if r.kind == "gpu":
            assert r.duration_s == pytest.approx(s.true_s / (1.8 if len(r.gpus) == 2 else 1.0), rel=0.05, abs=0.02)


def test_same_seed_same_numbers(workload, greedy_run):
    again = simulate(workload, FLEET, tangram_policy(ControllerConfig(deterministic=True)))
    assert [(r.action, r.dispatch_s, r.end_s, r.mode, r.node, r.gpus) for r in again.records] == \
        [(r.action, r.dispatch_s, r.end_s, r.mode, r.node, r.gpus) for r in greedy_run.records]
    other = synthetic(12, steps=6, seed=8, arrival_s=3.0, model="rm", quota="web")
    assert simulate(other, FLEET).summary()["mean_act_s"] != greedy_run.summary()["mean_act_s"]


def test_greedy_and_fifo_through_the_same_pools(workload, greedy_run):
    fifo = simulate(workload, FLEET, SharedFifoPolicy.factory(cores=2))
    assert len(fifo.records) == len(greedy_run.records)
    assert {r.cores for r in fifo.records if r.kind == "cpu"} == {2}
    assert max(r.cores for r in greedy_run.records if r.kind == "cpu") > 2  # elastic
    for run in (fifo, greedy_run):
        s = run.summary()
        assert 0 < s["p50_act_s"] <= s["p99_act_s"] and s["makespan_s"] > 0


def test_oracle_durations_plan_with_the_truth(workload):
    run = simulate(workload, FLEET, tangram_policy(ControllerConfig(deterministic=True),
                                                   estimator=OracleEstimator(workload.truth())))
    est = {e["action"]["id"]: e["estimate_s"] for e in run.events if e["type"] == "accepted"}
    assert est == pytest.approx(workload.truth())


def test_journal_file_matches_memory(tmp_path, workload):
    from tangram.runtime.journal import Journal

    path = tmp_path / "run.jsonl"
    run = simulate(workload, FLEET, SharedFifoPolicy.factory(cores=1), journal_path=str(path))
    assert list(Journal.read(path)) == json.loads(json.dumps(run.events))  # tuples become lists


class _Greedy:
    """A broken policy: dispatches every action at once on n0 with 8 cores."""

    min_epoch_interval_s = 0.0

    def __init__(self, fleet, executor, clock, journal):
        self.executor, self.queue = executor, []

    def open_trajectory(self, trajectory_id, memory_gb=0.0):
        return None

    def close_trajectory(self, trajectory_id):
        pass

    def submit(self, action, payload=None, tool=None):
        from tangram.runtime.controller import Job
        from tangram.runtime.estimator import Estimate, EstimateKey

        self.queue.append(Job(action, payload, "x", EstimateKey("t", "x"), Estimate(1, 1), 0))

    def complete(self, action_id, outcome):
        pass

    def cancel(self, action_id):
        return False

    def epoch(self, now):
        for job in self.queue:
            k = job.action.elastic.cores.index(8)
            self.executor.launch(job, Assignment(action=job.action.id, start_s=now, end_s=now + 1, mode=k,
                                                 placement=Placement(node="n0", cores=8)))
        self.queue = []
        return EpochReport(now, [], 0, 0, 0)


def test_pools_refuse_an_over_committing_policy():
    spec = ActionSpec("cpu", true_s=1.0, estimate_s=1.0)
    w = Workload(tuple(TrajectoryScript(id=f"t{i}", task="x", start_s=0.0, steps=(Step(0.0, spec),))
                       for i in range(2)))
    with pytest.raises(CapacityError, match="busy cores n0"):
        simulate(w, FLEET, _Greedy)


# --------------------------------------------------------------------------- metrics

def _rec(action, release, dispatch, end, cores=0, gpus=()):
    return ActionRecord(action=action, trajectory=None, task="t", kind="cpu", release_s=release, dispatch_s=dispatch,
                        start_s=dispatch, end_s=end, mode=0, node="n0", cores=cores, gpus=gpus, quota=None,
                        duration_s=end - dispatch, load_s=0.0, status="ok")


def test_run_metrics_on_hand_made_records():
    recs = [_rec("a", 0.0, 0.0, 2.0, cores=2), _rec("b", 1.0, 2.0, 4.0, gpus=("g0",))]
    s = act_summary(recs)
    assert (s["count"], s["mean_act_s"], s["p50_act_s"]) == (2, 2.5, 2.5)
    assert s["p99_act_s"] == pytest.approx(2.99)
    assert makespan(recs) == 4.0
    assert resource_seconds(recs, gpu_core_equivalent=8.0) == 2 * 2 + 2 * 8
    u = utilisation(recs, total_cores=4, total_gpus=1, bin_s=1.0)
    assert [t for t, _, _ in u] == [0.0, 1.0, 2.0, 3.0]
    assert [c for _, c, _ in u] == [0.5, 0.5, 0.0, 0.0]
    assert [g for _, _, g in u] == [0.0, 0.0, 1.0, 1.0]
    assert act_summary([])["count"] == 0 and makespan([]) == 0.0 and utilisation([], 1, 1) == []
