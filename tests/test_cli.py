"""The offline command line: the contract other tools rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tangram.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "instances" / "examples" / "trajectory_chain.json"


def test_solve_writes_the_result_contract_and_check_accepts_it(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["solve", str(EXAMPLE), "--solver", "cpsat", "--time-limit", "5", "--output", str(out)]) == 0
    assert "status" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert {"status", "solver", "objective", "bound", "runtime_s", "attempts", "schedule", "metrics"} <= result.keys()
    assert {"action", "start_s", "end_s", "mode", "placement"} <= result["schedule"][0].keys()
    assert {"mean_act_s", "p99_act_s", "makespan_s"} <= result["metrics"].keys()
    assert main(["check", str(EXAMPLE), str(out)]) == 0
    assert "feasible" in capsys.readouterr().out


def test_check_lists_every_violation_of_a_tampered_schedule(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["solve", str(EXAMPLE), "--solver", "greedy", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    for row in result["schedule"]:  # everything squeezed into the first instant
        row["end_s"] -= row["start_s"]
        row["start_s"] = 0.0
    out.write_text(json.dumps(result))
    capsys.readouterr()
    assert main(["check", str(EXAMPLE), str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("before" in line for line in lines if line.startswith("violation:"))
    assert lines[-1].endswith("violation(s)")


def test_inspect_prints_utilisation_and_draws_a_gantt_chart(tmp_path, capsys):
    out, png = tmp_path / "result.json", tmp_path / "gantt.png"
    main(["solve", str(EXAMPLE), "--solver", "greedy", "--output", str(out)])
    assert main(["inspect", str(out), "--instance", str(EXAMPLE), "--plot", str(png)]) == 0
    assert "utilisation" in capsys.readouterr().out
    assert png.stat().st_size > 1000


def test_import_psplib_and_schema(tmp_path, capsys):
    out = tmp_path / "j301_1.json"
    assert main(["import", "psplib", str(ROOT / "instances" / "psplib" / "j301_1.sm"), "-o", str(out)]) == 0
    assert len(json.loads(out.read_text())["actions"]) == 32
    capsys.readouterr()
    assert main(["schema"]) == 0
    assert "Instance" in json.loads(capsys.readouterr().out)["title"]


BAD = [
    ('{"actions": [', "malformed JSON"),
    ('{"nodes": [], "bogus": 1}', "bogus: Extra inputs are not permitted"),
    ('{"actions": [{"id": "a", "kind": "cpu", "sandbox": "nope", "modes": [{"duration_s": 1, "cores": 1}]}]}',
     "actions[a].sandbox: unknown sandbox 'nope'"),
    ('{"nodes": [{"id": "n", "cores": 4}], "actions": [{"id": "a", "kind": "cpu", "modes": [{"duration_s": -1, '
     '"cores": 1}]}]}', "actions.0.modes.0.duration_s: Input should be greater than or equal to 0"),
    ('{"nodes": [{"id": "n", "cores": 4}], "actions": [{"id": "a", "kind": "cpu", "modes": [{"duration_s": 1, '
     '"cores": 16}]}]}', "infeasible capacity"),
]


@pytest.mark.parametrize("text,rule", BAD, ids=[r for _, r in BAD])
def test_bad_input_is_one_line_naming_file_field_and_rule(text, rule, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert main(["solve", str(path), "--solver", "greedy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: ") and rule in err
    assert "\n" not in err and "Traceback" not in err


def test_unknown_solver_and_missing_file_are_clear_errors(tmp_path, capsys):
    assert main(["solve", str(EXAMPLE), "--solver", "gurobi"]) == 2
    assert "unknown backend 'gurobi'" in capsys.readouterr().err
    assert main(["solve", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
