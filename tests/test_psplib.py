"""PSPLIB import: structure of the real files, malformed input, solving to the known optima."""

from __future__ import annotations

from pathlib import Path

import pytest

from tangram import SolveConfig, SolveStatus, solve, violations
from tangram.io.files import InputError, read_instance, write_model
from tangram.io.psplib import parse_psplib, read_psplib

PSPLIB = Path(__file__).resolve().parents[1] / "instances" / "psplib"
FILES = sorted(PSPLIB.glob("*.sm"))
# Optimal makespans from PSPLIB's j30opt / j60opt tables (see instances/psplib/README.md).
OPTIMUM = {"j301_1": 43, "j301_2": 47, "j301_3": 47, "j301_4": 62, "j601_1": 77}
ONE_SECOND = SolveConfig(tick_s=1.0)  # one PSPLIB period is one second


def test_files_are_present():
    assert len(FILES) >= 5
    assert {f.stem for f in FILES} >= set(OPTIMUM)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_structure(path: Path):
    inst = read_psplib(path)
    jobs = int(inst.metadata["jobs"])
    assert inst.name == path.stem and inst.metadata["source"] == path.name
    assert inst.metadata["format"] == "psplib-sm"
    assert len(inst.actions) == jobs and [a.id for a in inst.actions] == [f"j{n}" for n in range(1, jobs + 1)]
    assert [r.id for r in inst.renewables] == ["R1", "R2", "R3", "R4"]
    assert (inst.objective.makespan, inst.objective.weighted_act) == (1.0, 0.0)
    source, sink = inst.actions[0], inst.actions[-1]
    for dummy in (source, sink):
        assert dummy.modes[0].duration_s == 0 and not dummy.modes[0].renewable
    has_successor = {lag.action for a in inst.actions for lag in a.after}
    assert source.after == () and sink.id not in has_successor
    assert all(a.after for a in inst.actions[1:]), "every real job follows the source, directly or not"
    assert all(a.id in has_successor for a in inst.actions[:-1]), "every job leads to the sink"
    cap = {r.id: r.capacity for r in inst.renewables}
    for a in inst.actions:
        (mode,) = a.modes
        assert a.kind == "generic" and all(0 < u <= cap[r] for r, u in mode.renewable.items())


def test_j301_1_values():
    inst = read_psplib(PSPLIB / "j301_1.sm")
    assert [r.capacity for r in inst.renewables] == [12, 13, 4, 12]
    ix = inst.index().actions
    assert ix["j2"].modes[0].duration_s == 8 and ix["j2"].modes[0].renewable == {"R1": 4}
    assert ix["j20"].modes[0].renewable == {"R2": 10}
    assert {lag.action for lag in ix["j20"].after} == {"j5", "j11", "j18"}
    assert all(lag.lag_s == 0 for a in inst.actions for lag in a.after)
    assert inst.metadata["horizon_s"] == 158


def test_json_round_trip(tmp_path: Path):
    inst = read_psplib(PSPLIB / "j601_1.sm")
    write_model(inst, tmp_path / "j601_1.json")
    assert read_instance(tmp_path / "j601_1.json") == inst


# --------------------------------------------------------------------------- malformed input

J301_1 = (PSPLIB / "j301_1.sm").read_text()


def _edit(old: str, new: str) -> str:
    assert J301_1.count(old) == 1, old
    return J301_1.replace(old, new)


@pytest.mark.parametrize(("text", "where", "rule"), [
    (_edit("jobs (incl. supersource/sink ):  32", "jobs:  32"), "bad.sm:", "missing header line"),
    (_edit("PRECEDENCE RELATIONS:", "PRECEDENCE:"), "bad.sm:", "missing section 'PRECEDENCE RELATIONS:'"),
    (_edit("   2        1          3           6  11  15", "   2        1          3           6  11"),
     "bad.sm:20:", "job 2 announces 3 successors but lists 2"),
    (_edit("   2        1          3           6  11  15", "   2        2          3           6  11  15"),
     "bad.sm:20:", "job 2 has 2 modes"),
    (_edit("   5        1          1          20", "   5        1          1          40"),
     "bad.sm:23:", "successor 40 outside 1..32"),
    (_edit("  3      1     4      10    0    0    0", "  3      1     4      10    0    0"),
     "bad.sm:57:", "got 6 numbers"),
    (_edit("  3      1     4      10    0    0    0", "  3      1    -4      10    0    0    0"),
     "bad.sm:57:", "must be >= 0"),
    (_edit("  3      1     4      10    0    0    0", "  4      1     4      10    0    0    0"),
     "bad.sm:57:", "expected 3, got 4"),
    (_edit("   12   13    4   12", "   12   13    4"), "bad.sm:90:", "one row of 4 capacities"),
    (_edit("  - nonrenewable              :  0", "  - nonrenewable              :  2"),
     "bad.sm:10:", "nonrenewable resources are not part"),
    (_edit("   12   13    4   12", "    9   13    4   12"), "bad.sm: actions", "no mode fits"),
    (_edit("  31        1          1          32", "  31        1          1           2"),
     "bad.sm: ", "precedence cycle"),
])
def test_malformed_input_names_file_line_and_rule(text: str, where: str, rule: str):
    with pytest.raises(InputError) as err:
        parse_psplib(text, source="bad.sm")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(where) and rule in message, message


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(OSError):
        read_psplib(tmp_path / "missing.sm")


# --------------------------------------------------------------------------- solving


@pytest.mark.parametrize("name", sorted(OPTIMUM))
def test_greedy_is_feasible_and_never_beats_the_optimum(name: str):
    inst = read_psplib(PSPLIB / f"{name}.sm")
    result = solve(inst, solver="greedy", config=ONE_SECOND)
    assert result.status == SolveStatus.FEASIBLE
    assert violations(inst, result.schedule) == []
    assert result.objective >= OPTIMUM[name]
    assert result.objective == result.metrics.makespan_s


@pytest.mark.slow
@pytest.mark.parametrize("name", ["j301_1", "j301_2", "j301_3", "j301_4"])
def test_cpsat_proves_the_known_optimum(name: str):
    pytest.importorskip("tangram.solver.cpsat")
    inst = read_psplib(PSPLIB / f"{name}.sm")
    config = SolveConfig(tick_s=1.0, time_limit_s=60, deterministic=True, num_workers=1)
    result = solve(inst, solver="cpsat", config=config)
    assert result.solver == "cpsat" and result.status == SolveStatus.OPTIMAL, result.attempts
    assert result.objective == pytest.approx(OPTIMUM[name]) and result.bound == pytest.approx(OPTIMUM[name])
    assert violations(inst, result.schedule) == []
