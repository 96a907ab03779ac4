"""The shipped instances: they load, round-trip, regenerate, solve feasibly and stay bound-consistent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tangram import SolveConfig, evaluate, solve, violations
from tangram.io.files import read_instance, write_model
from tangram.model.compiled import expand_modes
from tangram.model.instance import Instance

ROOT = Path(__file__).resolve().parents[1] / "instances"
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))
REGRESSION = sorted((ROOT / "regression").glob("*.json"))
ALL = EXAMPLES + REGRESSION
EPS = 1e-6


def _ids(p: Path) -> str:
    return f"{p.parent.name}/{p.stem}"


def _generator():
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_instances_are_present():
    assert len(EXAMPLES) >= 5 and 3 <= len(REGRESSION) <= 5


@pytest.mark.parametrize("path", ALL, ids=_ids)
def test_loads_and_round_trips_losslessly(path: Path, tmp_path: Path):
    inst = read_instance(path)
    assert inst.metadata.get("description"), "every instance says what it is"
    assert Instance.model_validate_json(inst.model_dump_json()) == inst
    write_model(inst, tmp_path / path.name)
    assert read_instance(tmp_path / path.name) == inst
    assert (tmp_path / path.name).read_text() == path.read_text(), "files are written in the canonical form"


def test_generator_reproduces_the_files():
    gen = _generator()
    for folder, builders in (("examples", gen.EXAMPLES), ("regression", gen.REGRESSION)):
        assert {p.stem for p in (ROOT / folder).glob("*.json")} == set(builders)
        for name, build in builders.items():
            stored = read_instance(ROOT / folder / f"{name}.json")
            recorded = {k: v for k, v in stored.metadata.items() if k not in build().metadata}
            assert build().model_copy(update={"metadata": {**build().metadata, **recorded}}) == stored, name


@pytest.mark.parametrize("path", EXAMPLES, ids=_ids)
def test_greedy_schedules_every_example_feasibly(path: Path):
    inst = read_instance(path)
    result = solve(inst, solver="greedy", config=SolveConfig())
    assert result.status.has_solution(), result.attempts
    assert violations(inst, result.schedule) == []
    assert result.objective == pytest.approx(evaluate(inst, result.schedule))


def test_examples_cover_the_model():
    """Together the examples use every feature of the model at least once."""
    insts = [read_instance(p) for p in EXAMPLES]
    actions = [a for i in insts for a in i.actions]
    modes = [m for i in insts for a in i.actions for m in expand_modes(a, i.index().models)]
    gpus = [g for i in insts for g in i.gpus]
    features = {
        "elastic cpu actions": any(a.elastic for a in actions),
        "explicit modes": any(a.modes for a in actions),
        "work_s gpu actions": any(a.work_s for a in actions),
        "sandbox affinity": any(a.sandbox and a.kind == "cpu" for a in actions),
        "sandbox memory": any(s.memory_gb > 0 for i in insts for s in i.sandboxes),
        "action memory": any(m.memory_gb > 0 for m in modes),
        "1/2/4-gpu modes": {1, 2, 4} <= {m.gpus for m in modes},
        "two gpu types": len({g.type for g in gpus}) >= 2,
        "two nvlink domains": any(len({g.domain_id for g in i.gpus}) >= 2 for i in insts),
        "resident models": any(i.resident for i in insts),
        "load times": any(m.load_s > 0 for i in insts for m in i.models),
        "data transfer": any(a.input_mb > 0 and a.sandbox for a in actions) and any(i.links for i in insts),
        "quota concurrency": any(q.concurrency < 10 for i in insts for q in i.quotas),
        "quota rate": any(q.calls_per_window for i in insts for q in i.quotas),
        "running cpu": any(r.node for i in insts for r in i.running),
        "running gpu": any(r.gpus for i in insts for r in i.running),
        "running api": any(r.quota for i in insts for r in i.running),
        "lags": any(lag.lag_s > 0 for a in actions for lag in a.after),
        "deadlines": any(a.deadline_s is not None for a in actions),
        "now_s > 0": any(i.now_s > 0 for i in insts),
        "a constraint family off": any(not all(i.constraints.model_dump().values()) for i in insts),
    }
    for term in ("weighted_act", "makespan", "model_load", "resource_seconds", "fairness"):
        features[f"objective {term}"] = any(getattr(i.objective, term) > 0 for i in insts)
    assert [f for f, ok in features.items() if not ok] == []


@pytest.mark.slow
@pytest.mark.parametrize("path", REGRESSION, ids=_ids)
def test_regression_bounds_are_consistent(path: Path):
    """A fresh CP-SAT solve agrees with the recorded one: its bound never exceeds the recorded best
    objective and its objective never beats the recorded proven bound (schedules may differ)."""
    pytest.importorskip("tangram.solver.cpsat")
    inst = read_instance(path)
    best, bound = float(inst.metadata["best_objective"]), float(inst.metadata["proven_bound"])
    assert bound <= best + EPS
    config = SolveConfig(time_limit_s=5.0, tick_s=0.1, deterministic=True, num_workers=1)
    result = solve(inst, solver="cpsat", config=config)
    assert result.status.has_solution(), result.attempts
    assert violations(inst, result.schedule) == []
    assert result.objective >= bound - EPS * max(1.0, abs(bound))
    if result.bound is not None:
        assert result.bound <= best + EPS * max(1.0, abs(best))
