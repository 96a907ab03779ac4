"""The live demo end to end on a tiny workload: both policies, nothing lost, the report written."""

from __future__ import annotations

import json

import pytest

from tangram.demo import problems, summarise, think_times


def test_workload_is_real_code_and_reproducible():
    work = problems(3, 2, seed=1)
    assert [p.id for p in work] == [p.id for p in problems(3, 2, seed=1)]
    assert sorted(p.task for p in work) == ["humaneval", "humaneval", "mbpp", "mbpp", "mbpp"]
    ns: dict = {}
    exec(compile(next(p for p in work if p.task == "humaneval").program, "he", "exec"), ns)  # tests pass
    t = think_times(100, seed=0)
    assert t.min() >= 0.05 and t.max() <= 3.0 and len(set(t.round(3))) > 10


def test_summary_counts_lost_actions_and_bound_resources():
    logs = {"t": {"submitted": ["a", "b", "c"], "ready": 0.0, "opened": 1.0, "closed": 5.0}}
    recs = [{"id": "a", "done": True, "state": "ok", "act_s": 1.0, "dispatched_at": 2.0, "finished_at": 3.0,
             "cores": 1, "gpus": []},
            {"id": "b", "done": True, "state": "failed", "act_s": 3.0, "dispatched_at": 3.0, "finished_at": 4.0,
             "cores": 0, "gpus": ["g0"]}]
    s = summarise(logs, recs, 0.0, 10.0)
    assert (s["ok"], s["failed"], s["lost"]) == (1, 1, 1) and s["resource_s"] == pytest.approx(2.0)
    assert s["mean_act_admission_s"] == pytest.approx(2.0)  # no run0 action: no admission added
    bound = summarise(logs, recs, 0.0, 10.0, bound_cores=2, dedicated_gpus=4)
    assert bound["resource_s"] == pytest.approx(4 * 2 + 4 * 10)


@pytest.mark.ray
@pytest.mark.slow
def test_demo_runs_both_policies_and_loses_nothing(tmp_path):
    from tangram.demo import run_demo

    summary = run_demo(mbpp=3, humaneval=2, seed=0, out=tmp_path, cores=2)
    for name in ("tangram", "trajectory-bound"):
        s = summary["policies"][name]
        assert s["actions"] == 15 and s["lost"] == 0 and s["ok"] == 15 and s["tests_passed"] == 5
    for f in ("table.txt", "summary.json", "act_cdf.png", "timeline.png", "records-tangram.json"):
        assert (tmp_path / f).stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["ratios"]["makespan"] > 0
