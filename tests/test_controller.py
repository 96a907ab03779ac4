"""The controller with a fake executor and a fake clock."""

import random

import pytest

from tangram.model.instance import Action, ApiQuota, CpuNode, Elastic, Gpu, Lag, Mode, RewardModel
from tangram.runtime.controller import ActionOutcome, Controller, ControllerConfig, Fleet, place_sandbox
from tangram.runtime.estimator import DurationEstimator
from tangram.runtime.journal import Journal, unfinished


class FakeClock:
    def __init__(self, t=0.0):
        self.t = t

    def now(self):
        return self.t


class FakeExecutor:
    """Records launches; cancellations are reported back as completions by the test."""

    def __init__(self):
        self.launched, self.cancelled = [], []

    def launch(self, job, assignment):
        self.launched.append((job.action.id, assignment))

    def cancel(self, action_id):
        self.cancelled.append(action_id)


FLEET = Fleet(
    nodes=(CpuNode(id="n0", cores=4, memory_gb=16),),
    gpus=(Gpu(id="g0", type="H100", memory_gb=80, machine="m0"),),
    models=(RewardModel(id="rm", memory_gb=40, load_s=3.0), RewardModel(id="rm2", memory_gb=50, load_s=1.0)),
    quotas=(ApiQuota(id="web", concurrency=4, calls_per_window=1, window_s=1.0),),
)


def job(id, base=1.0, cores=(4,), **kw):
    return Action(id=id, kind="cpu", elastic=Elastic(base_s=base, parallel_fraction=1.0, cores=cores), **kw)


@pytest.fixture
def ctl():
    clock, ex = FakeClock(), FakeExecutor()
    c = Controller(FLEET, ex, clock, ControllerConfig(tick_s=0.01), journal=Journal(keep=True))
    return c, clock, ex


def test_dispatches_only_what_starts_now_and_running_blocks_capacity(ctl):
    c, clock, ex = ctl
    for i in range(3):
        c.submit(job(f"a{i}", base=2.0))  # each takes the whole node
    r = c.epoch(0.0)
    assert len(r.dispatched) == 1 and r.pending == 2 and r.running == 1
    assert r.next_s == pytest.approx(0.5)  # 4 cores: 2 s of work takes 0.5 s
    assert c.epoch(0.1).dispatched == []  # the running action holds the cores
    clock.t = 0.3  # it finished early: its cores come back at once
    c.complete(r.dispatched[0], ActionOutcome(duration_s=0.3))
    r2 = c.epoch(0.3)
    assert len(r2.dispatched) == 1 and r2.dispatched[0] not in r.dispatched
    aid, asg = ex.launched[-1]
    assert asg.start_s == pytest.approx(0.3) and asg.placement.node == "n0" and asg.placement.cores == 4


def test_overrunning_action_keeps_blocking(ctl):
    c, clock, ex = ctl
    c.submit(job("a", base=2.0))
    c.submit(job("b", base=2.0))
    c.epoch(0.0)
    r = c.epoch(5.0)  # "a" was estimated to end at 0.5 s and is still running
    assert r.dispatched == [] and r.next_s is None  # no solve needed: nothing can start
    inst = c.snapshot(5.0)
    assert inst.running[0].end_s == pytest.approx(5.0 + c.config.overdue_s)


def test_never_loses_an_action():
    rng = random.Random(3)
    clock, ex = FakeClock(), FakeExecutor()
    c = Controller(FLEET, ex, clock, ControllerConfig(tick_s=0.01))
    submitted, completed = set(), []
    for step in range(200):
        clock.t = step * 0.1
        if rng.random() < 0.5:
            aid = f"x{step}"
            c.submit(job(aid, base=rng.uniform(0.1, 2.0), cores=(1, 2, 4)))
            submitted.add(aid)
        c.epoch(clock.t)
        for aid in list(c.running):
            if rng.random() < 0.3:
                c.complete(aid, ActionOutcome(duration_s=0.2))
                completed.append(aid)
    while c.pending or c.running:
        clock.t += 0.1
        for aid in list(c.running):
            c.complete(aid, ActionOutcome(duration_s=0.1))
            completed.append(aid)
        c.epoch(clock.t)
    assert sorted(completed) == sorted(submitted)
    assert len({a for a, _ in ex.launched}) == len(ex.launched) == len(submitted)


def test_cancel_pending_and_running(ctl):
    c, clock, ex = ctl
    c.submit(job("a"))
    c.submit(job("b"))
    c.epoch(0.0)
    assert c.cancel("b") and "b" not in c.pending
    assert c.cancel("a") and ex.cancelled == ["a"]  # running: the executor is asked
    c.complete("a", ActionOutcome(status="cancelled"))
    assert not c.cancel("zzz")
    assert not c.pending and not c.running
    assert c.epoch(1.0).dispatched == []


def test_complete_updates_the_estimator(ctl):
    c, clock, ex = ctl
    c.estimator = DurationEstimator(min_samples=3)
    for i in range(3):
        c.submit(job(f"a{i}", base=8.0), tool="exec")  # hint 8 s, reality 4x faster
        c.epoch(clock.t)
        aid, asg = ex.launched[-1]
        clock.t = asg.start_s + (asg.end_s - asg.start_s) / 4
        c.complete(aid, ActionOutcome(duration_s=(asg.end_s - asg.start_s) / 4))
    j = c.submit(job("next", base=8.0), tool="exec")
    assert j.estimate.source == "default/exec/none" and j.estimate.mean_s == pytest.approx(2.0, rel=0.05)


def test_prev_outcome_keys_the_next_estimate(ctl):
    c, clock, ex = ctl
    c.submit(job("a", trajectory="t1"))
    c.epoch(0.0)
    c.complete("a", ActionOutcome(status="timeout", duration_s=1.0))
    assert c.submit(job("b", trajectory="t1")).key.prev == "timeout"


def test_model_load_then_resident_then_evicted(ctl):
    c, clock, ex = ctl
    c.submit(Action(id="s1", kind="gpu", model="rm", work_s=1.0))
    r = c.epoch(0.0)
    assert r.dispatched == ["s1"]
    j = c.running["s1"]
    assert j.loads == ("g0",) and j.load_s == 3.0 and j.assignment.start_s == pytest.approx(3.0)
    clock.t = 4.0
    c.complete("s1", ActionOutcome(duration_s=1.0, load_s=3.0))
    c.submit(Action(id="s2", kind="gpu", model="rm", work_s=1.0))
    assert c.epoch(4.0).dispatched == ["s2"] and c.running["s2"].loads == ()
    clock.t = 5.0
    c.complete("s2", ActionOutcome(duration_s=1.0))
    c.submit(Action(id="s3", kind="gpu", model="rm2", work_s=1.0))  # 40 + 50 GiB > 80: rm goes
    assert c.epoch(5.0).dispatched == ["s3"]
    assert c.residency.snapshot() == {"g0": ("rm2",)}
    types = [e["type"] for e in c.journal.events if e["type"] in ("load", "evict")]
    assert types == ["load", "evict", "load"]


def test_quota_rate_counts_finished_calls(ctl):
    c, clock, ex = ctl
    for i in range(2):
        c.submit(Action(id=f"q{i}", kind="api", quota="web", modes=(Mode(duration_s=0.1),)))
    assert len(c.epoch(0.0).dispatched) == 1
    clock.t = 0.1
    c.complete(ex.launched[0][0], ActionOutcome(duration_s=0.1))
    r = c.epoch(0.2)  # the call finished but its rate token is held for the whole window
    assert r.dispatched == [] and r.next_s == pytest.approx(1.0)
    assert len(c.epoch(1.0).dispatched) == 1


def test_sandbox_affinity_and_placement():
    nodes = (CpuNode(id="a", cores=4, memory_gb=10), CpuNode(id="b", cores=4, memory_gb=10))
    from tangram.model.instance import Sandbox
    assert place_sandbox(nodes, [], 2.0) == "a"
    assert place_sandbox(nodes, [Sandbox(id="s", node="a", memory_gb=2.0)], 2.0) == "b"
    assert place_sandbox(nodes, [Sandbox(id="s", node="a", memory_gb=9.0), Sandbox(id="t", node="b", memory_gb=9.0)],
                         2.0) is None
    fleet = Fleet(nodes=nodes)
    clock, ex = FakeClock(), FakeExecutor()
    c = Controller(fleet, ex, clock)
    c.open_trajectory("t1", 6.0)
    sb = c.open_trajectory("t2", 1.0)
    assert sb.node == "b"
    c.submit(job("x", trajectory="t2"))
    c.epoch(0.0)
    assert ex.launched[0][1].placement.node == "b"
    c.submit(job("y", trajectory="t2"))  # still pending when the trajectory closes
    c.close_trajectory("t2")
    assert "t2" not in c.sandboxes and "y" not in c.pending and "x" in c.running


def test_submit_rejects_what_cannot_run(ctl):
    c, clock, ex = ctl
    with pytest.raises(ValueError, match="unknown model"):
        c.submit(Action(id="g", kind="gpu", model="nope", work_s=1.0))
    with pytest.raises(ValueError, match="no mode fits"):
        c.submit(job("big", cores=(8,)))
    with pytest.raises(ValueError, match="unknown action"):
        c.submit(job("lagged", after=(Lag(action="ghost"),)))
    c.submit(job("ok"))
    with pytest.raises(ValueError, match="duplicate"):
        c.submit(job("ok"))


def test_lag_to_a_finished_action_becomes_a_release(ctl):
    c, clock, ex = ctl
    c.submit(job("a"))
    c.submit(job("b", after=(Lag(action="a", lag_s=2.0),)))
    assert c.epoch(0.0).dispatched == ["a"]
    clock.t = 0.25
    c.complete("a", ActionOutcome(duration_s=0.25))
    r = c.epoch(0.25)
    assert r.dispatched == [] and r.next_s == pytest.approx(2.25)
    assert c.epoch(2.25).dispatched == ["b"]


def test_journal_round_trip_and_recovery(tmp_path):
    path = tmp_path / "j.jsonl"
    clock, ex = FakeClock(), FakeExecutor()
    with Journal(path) as jr:
        c = Controller(FLEET, ex, clock, journal=jr)
        c.submit(job("a"), payload={"code": "print(1)"})
        c.submit(job("b"), payload={"code": "print(2)"})
        c.submit(job("c"))
        c.epoch(0.0)
        c.complete("a", ActionOutcome(duration_s=0.25, signals={"exit_code": 0}))
        c.cancel("c")
    events = list(Journal.read(path))
    assert [e["type"] for e in events] == ["accepted"] * 3 + ["dispatched", "solve", "completed", "cancelled"]
    assert all("t" in e for e in events)
    left = unfinished(events)
    assert [(a.id, p) for a, p, _ in left] == [("b", {"code": "print(2)"})]
    assert left[0][0] == job("b")  # the action as submitted, hints included
    with path.open("a") as f:
        f.write('{"type": "acc')  # a torn last line
    assert len(list(Journal.read(path))) == len(events)


def test_window_puts_startable_work_first():
    """Old GPU actions waiting for the one GPU must not hide CPU work from a small window."""
    clock, ex = FakeClock(), FakeExecutor()
    c = Controller(FLEET, ex, clock, ControllerConfig(window=1))
    c.submit(Action(id="g1", kind="gpu", model="rm", work_s=1.0))
    c.submit(Action(id="g2", kind="gpu", model="rm", work_s=1.0))
    c.submit(job("c1"))
    assert c.epoch(0.0).dispatched == ["g1"]
    assert c.window(0.0) == ((c.pending["c1"].action,), 1)
    assert c.epoch(0.0).dispatched == ["c1"]
    r = c.epoch(0.0)
    assert r.dispatched == [] and r.window == 1 and r.status is None  # g2 waits; no solve
