"""The paper experiment: policies, tuning, the resource-saving search and the result document."""

from pathlib import Path

import pytest

from tangram.experiment import make_setup, paper, policy_factory, result_table, run_policy, smallest_fleet, tune
from tangram.workload.scenario import load_scenario

QUICK = Path(__file__).resolve().parent.parent / "instances" / "scenarios" / "quick.toml"


@pytest.fixture(scope="module")
def tiny():
    """The quick scenario cut to 8 trajectories."""
    return load_scenario(QUICK).model_copy(update={"batch": 8})


def test_unknown_policy(tiny):
    with pytest.raises(ValueError, match="unknown"):
        policy_factory(make_setup(tiny), "round-robin")


def test_runs_are_reproducible(tiny):
    setup = make_setup(tiny)
    _, a = run_policy(setup, "tangram-greedy")
    _, b = run_policy(setup, "tangram-greedy")
    keys = ("mean_act_s", "p99_act_s", "step_s", "resource_seconds")
    assert [a[k] for k in keys] == [b[k] for k in keys]
    _, c = run_policy(make_setup(tiny, seed=3), "tangram-greedy")
    assert c["mean_act_s"] != a["mean_act_s"]


def test_tune_picks_the_best_trial(tiny):
    best, trials = tune(make_setup(tiny), "shared-fifo")
    assert len(trials) == 4 and best == min(trials, key=lambda t: (round(t[1], 6), t[2]))[0]


def test_smallest_fleet_search(tiny):
    out = smallest_fleet(tiny, None, {"easy": float("inf"), "impossible": 0.0}, scales=(1.0, 0.5), refine=1)
    assert out["impossible"]["resource_saving"] == 0.0 and out["impossible"]["scale"] is None
    easy = out["easy"]
    assert easy["scale"] < 1.0 and 0 < easy["resource_saving"] == pytest.approx(1 - easy["fleet_fraction"])


@pytest.mark.slow
def test_paper_document(tiny, tmp_path):
    doc = paper(tiny, plots=tmp_path, progress=False)
    for p, r in doc["policies"].items():
        assert {"mean_act_s", "p50_act_s", "p99_act_s", "step_s", "resource_seconds", "utilisation"} <= set(r), p
        assert r["count"] == doc["workload"]["actions"]
    for b, c in doc["comparisons"].items():
        assert c["speedup_act"] == pytest.approx(doc["policies"][b]["mean_act_s"] /
                                                 doc["policies"]["tangram-cpsat"]["mean_act_s"])
        assert 0.0 <= c["resource_saving"] < 1.0
    assert set(doc["ablations"]) == {"greedy-instead-of-cpsat", "no-elastic", "no-residency", "oracle-durations",
                                     "planner"}
    headers, rows = result_table(doc)
    assert len(rows) == 5 + 5 and len(headers) == len(rows[0])
    assert (tmp_path / "report.md").exists() and (tmp_path / "tangram-cpsat.jsonl").exists()
