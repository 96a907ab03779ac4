"""Scenarios: TOML files to fleets and workloads drawn from the bundled traces."""

import tomllib
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tangram.workload import traces
from tangram.workload.scenario import Scenario, load_scenario, mbpp_exec_s

ROOT = Path(__file__).resolve().parent.parent / "instances" / "scenarios"


@pytest.fixture(scope="module")
def quick():
    return load_scenario(ROOT / "quick.toml")


def test_shipped_scenarios_load_and_build(quick):
    default = load_scenario(ROOT / "default.toml")
    for s in (quick, default):
        fleet, w = s.build_fleet(), s.workload()
        assert len(w.trajectories) == s.batch
        assert {t.task for t in w.trajectories} == {t.name for t in s.tasks}
        assert fleet.nodes and fleet.gpus and {m.id for m in fleet.models} == {m.id for m in s.models}
    assert default.batch > quick.batch


def test_same_seed_same_workload_other_seed_differs(quick):
    assert quick.workload() == quick.workload()
    assert quick.workload(seed=1) != quick.workload()


def test_task_counts_follow_shares(quick):
    w = quick.workload()
    counts = {t.name: sum(1 for x in w.trajectories if x.task == t.name) for t in quick.tasks}
    total = sum(t.share for t in quick.tasks)
    for t in quick.tasks:
        assert abs(counts[t.name] - t.share / total * quick.batch) < 1


def test_durations_come_from_the_traces(quick):
    tb, mbpp = traces.terminal_bench(), set(mbpp_exec_s().tolist())
    setup, tests = set(tb["setup_s"].tolist()), set(tb["test_s"].tolist())
    for t in quick.workload().trajectories:
        kinds = [s.action.kind for s in t.steps]
        assert kinds[-1] == "gpu"  # every trajectory ends with its reward scoring
        if t.task == "swe":
            assert t.steps[0].action.tool == "setup" and t.steps[0].action.true_s in setup
            assert t.steps[-2].action.tool == "test" and t.steps[-2].action.true_s in tests
        if t.task == "mbpp":
            assert all(s.action.true_s in mbpp for s in t.steps if s.action.kind == "cpu")
        if t.task == "search":
            assert set(kinds[:-1]) == {"api"}


def test_measured_mbpp_table():
    x = mbpp_exec_s()
    assert 900 < len(x) <= 974 and (x > 0).all() and np.median(x) < 1.0


def test_fleet_scales_and_alibaba_machines(quick):
    full, half = quick.build_fleet(), quick.build_fleet(0.5)
    assert len(half.gpus) == len(full.gpus) // 2 and len(half.nodes) == 1
    assert quick.fleet_units(half) < quick.fleet_units(full)
    assert [m.load_s for m in full.models] == [m.load_s for m in quick.build_fleet().models]
    data = tomllib.loads((ROOT / "quick.toml").read_text())
    data["fleet"].update(gpu_machines=[], alibaba_gpu_machines=3, gpu_types={"G2": {"memory_gb": 80.0}})
    fleet = Scenario(**data).build_fleet()
    assert {g.type for g in fleet.gpus} == {"G2"} and len({g.machine for g in fleet.gpus}) == 3


@pytest.mark.parametrize("change, match", [
    ({"batch": 0}, "batch"),
    ({"surprise": 1}, "surprise"),
    ({"tasks": []}, "tasks"),
])
def test_invalid_scenarios_are_rejected(change, match):
    data = {**tomllib.loads((ROOT / "quick.toml").read_text()), **change}
    with pytest.raises(ValidationError, match=match):
        Scenario(**data)


def test_unknown_reward_model_names_the_task(quick):
    bad = quick.model_copy(update={"tasks": (quick.tasks[0].model_copy(update={"reward_model": "nope"}),)})
    with pytest.raises(ValueError, match="reward_model"):
        bad.workload()
