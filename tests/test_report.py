"""Run reports: metrics from journals, held resources, solver statistics, plots and the CLI round trip."""

from pathlib import Path

import pytest

from tangram.analysis.report import (
    Run,
    act_quantiles,
    held_resource_seconds,
    load_run,
    policy_table,
    run_metrics,
    solver_table,
    write_report,
)
from tangram.analysis.runs import ActionRecord
from tangram.cli import main

QUICK = Path(__file__).resolve().parent.parent / "instances" / "scenarios" / "quick.toml"


def _rec(action, release, dispatch, end, cores=0, gpus=(), kind="cpu"):
    return ActionRecord(action=action, trajectory="t", task="x", kind=kind, release_s=release, dispatch_s=dispatch,
                        start_s=dispatch, end_s=end, mode=0, node="n0" if cores else None, cores=cores, gpus=gpus,
                        quota=None, duration_s=end - dispatch, load_s=0.0, status="ok")


RECS = [_rec("a", 0.0, 1.0, 3.0, cores=2), _rec("b", 1.0, 1.0, 5.0, gpus=("g0",), kind="gpu")]


def test_run_metrics_by_hand():
    run = Run({"policy": "p", "cores": 4, "gpus": 2, "training_s": 10.0, "start_s": 0.0, "gpu_core_equivalent": 8.0},
              [], RECS)
    m = run_metrics(run)
    assert m["mean_act_s"] == pytest.approx((3 + 4) / 2)
    assert m["rollout_s"] == 5.0 and m["step_s"] == 15.0
    assert m["resource_seconds"] == pytest.approx(2 * 2 + 8 * 4)
    assert m["cpu_utilisation"] == pytest.approx(4 / (4 * 5)) and m["gpu_utilisation"] == pytest.approx(4 / (2 * 5))
    assert [q for q, _ in act_quantiles(run)][:2] == [0.1, 0.25]


def test_holds_replace_action_holdings():
    events = [{"type": "hold", "t": 0.0, "holder": "sandbox:t", "cores": 4},
              {"type": "hold", "t": 0.0, "holder": "replica", "gpus": ["g0", "g1"]},
              {"type": "release", "t": 6.0, "holder": "sandbox:t"}]
    # 4 cores for 6 s, 2 GPUs until the end (10 s) at 8 core equivalents each
    assert held_resource_seconds(RECS, events, 10.0, 8.0) == pytest.approx(24 + 8 * 20)
    assert held_resource_seconds(RECS, [], 10.0, 8.0) == pytest.approx(4 + 32)


def test_solver_table_counts_fallbacks_and_gaps():
    att = {"solver": "cpsat", "status": "feasible", "runtime_s": 0.1, "objective": 10.0, "bound": 8.0}
    events = [{"type": "solve", "t": 0, "solver": "cpsat", "status": "feasible", "runtime_s": 0.1, "attempts": [att]},
              {"type": "solve", "t": 1, "solver": "greedy", "status": "feasible", "runtime_s": 0.3,
               "attempts": [{**att, "objective": None}, {**att, "solver": "greedy"}]}]
    s = solver_table(Run({}, events))
    assert s["epochs_solved"] == 2 and s["fallbacks"] == 1 and s["total_solve_s"] == pytest.approx(0.4)
    assert s["mean_gap"] == pytest.approx(0.2) and s["statuses"] == {"feasible": 2}


def test_simulate_and_report_from_the_command_line(tmp_path, capsys):
    runs = []
    for policy in ("shared-fifo", "tangram-greedy"):
        out = tmp_path / f"{policy}.jsonl"
        assert main(["simulate", str(QUICK), "--policy", policy, "--output", str(out), "--cores", "2"]) == 0
        runs.append(out)
    first = load_run(runs[1])
    assert first.meta["policy"] == "tangram-greedy" and first.events[0]["type"] == "run"
    kinds = {e["type"] for e in first.events}
    assert {"accepted", "dispatched", "completed", "solve", "load"} <= kinds
    rows = policy_table([load_run(r) for r in runs])
    assert rows[0]["count"] == rows[1]["count"] > 0
    assert main(["report", *map(str, runs), "--output", str(tmp_path / "rep")]) == 0
    for name in ("act_cdf.png", "step_time.png", "utilisation.png", "gantt_tangram-greedy.png", "report.md"):
        assert (tmp_path / "rep" / name).stat().st_size > 0
    assert "tangram-greedy" in capsys.readouterr().out
    assert write_report(runs[:1], tmp_path / "one").name == "report.md"
    assert main(["report", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path)]) == 2
