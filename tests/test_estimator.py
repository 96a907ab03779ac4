"""The online duration estimator on synthetic sequences."""

import random

import pytest

from tangram.model.instance import Action, Elastic, Mode
from tangram.runtime.estimator import (
    DeclaredEstimator,
    DurationEstimator,
    EstimateKey,
    OracleEstimator,
    base_seconds,
    with_base,
)


def cpu(id="a", base=4.0):
    return Action(id=id, kind="cpu", elastic=Elastic(base_s=base, parallel_fraction=0.5, cores=(1, 2)))


def test_fallback_chain_prior_hint_then_learned():
    est = DurationEstimator(priors={"cpu": 7.0}, min_samples=2)
    key = EstimateKey("t1", "exec", "ok")
    assert est.estimate(cpu(base=0.0), key).source == "prior"
    assert est.estimate(cpu(base=0.0), key).mean_s == 7.0
    assert est.estimate(cpu(base=3.0), key).mean_s == 3.0  # the submitter's hint beats the prior
    est.observe(cpu(), key, 1.0)
    assert est.estimate(cpu(base=3.0), key).source == "hint"  # one sample is not enough
    est.observe(cpu(), key, 3.0)
    e = est.estimate(cpu(base=30.0), key)
    assert (e.mean_s, e.samples, e.source) == (2.0, 2, "t1/exec/ok")


def test_falls_back_from_prev_to_task_tool_to_tool():
    est = DurationEstimator(min_samples=1)
    est.observe(cpu(), EstimateKey("t1", "exec", "ok"), 2.0)
    assert est.estimate(cpu(), EstimateKey("t1", "exec", "failed")).source == "t1/exec"
    assert est.estimate(cpu(), EstimateKey("t2", "exec", "ok")).source == "exec"
    assert est.estimate(cpu(), EstimateKey("t2", "score", "ok")).source == "hint"


def test_causal_signal_separates_retries_from_first_runs():
    """After a failed call the next one is 5x longer; keyed estimates learn both."""
    rng = random.Random(0)
    est = DurationEstimator(min_samples=5)
    for _ in range(300):
        est.observe(cpu(), EstimateKey("t", "exec", "ok"), rng.uniform(0.8, 1.2))
        est.observe(cpu(), EstimateKey("t", "exec", "failed"), rng.uniform(4.0, 6.0))
    ok = est.estimate(cpu(), EstimateKey("t", "exec", "ok"))
    failed = est.estimate(cpu(), EstimateKey("t", "exec", "failed"))
    assert ok.mean_s == pytest.approx(1.0, abs=0.05)
    assert failed.mean_s == pytest.approx(5.0, abs=0.2)
    assert ok.mean_s < ok.high_s <= 1.2 and failed.mean_s < failed.high_s <= 6.0
    both = est.estimate(cpu(), EstimateKey("t", "exec", "timeout"))  # unseen signal: the pooled key
    assert ok.mean_s < both.mean_s < failed.mean_s


def test_p90_of_a_known_sequence_and_window_drift():
    est = DurationEstimator(min_samples=1, window=10, quantile=0.9)
    key = EstimateKey("t", "exec")
    for x in range(1, 11):
        est.observe(cpu(), key, float(x))
    e = est.estimate(cpu(), key)
    assert (e.mean_s, e.high_s) == (5.5, 9.0)
    for _ in range(10):  # the workload got slower: the window forgets the old samples
        est.observe(cpu(), key, 100.0)
    assert est.estimate(cpu(), key).mean_s == 100.0


def test_oracle_and_declared():
    a = cpu("x", base=4.0)
    assert OracleEstimator({"x": 1.5}).estimate(a, EstimateKey("t", "exec")).mean_s == 1.5
    assert DeclaredEstimator().estimate(a, EstimateKey("t", "exec")).mean_s == 4.0


def test_with_base_rescales_every_mode_source():
    a = cpu(base=4.0)
    assert base_seconds(with_base(a, 2.0)) == 2.0
    assert with_base(a, 2.0).elastic.duration(2) == pytest.approx(1.5)
    g = Action(id="g", kind="gpu", model="m", work_s=3.0)
    assert with_base(g, 1.0).work_s == 1.0
    m = Action(id="q", kind="api", quota="web", modes=(Mode(duration_s=2.0), Mode(duration_s=4.0)))
    assert [x.duration_s for x in with_base(m, 1.0).modes] == [1.0, 2.0]
