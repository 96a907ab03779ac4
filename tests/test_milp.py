"""The time-indexed MILP backend: one small instance per constraint family, solved
by HiGHS and CBC, each schedule judged by the checker, each objective by evaluate()."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tangram.model import (
    Action,
    ApiQuota,
    CpuNode,
    Elastic,
    Gpu,
    Instance,
    Lag,
    Mode,
    Objective,
    Parallelism,
    Renewable,
    RewardModel,
    Running,
    SolveStatus,
    compile_instance,
    evaluate,
    violations,
)
from tangram.solver import Plan, SolveConfig, solve, to_schedule
from tangram.solver import milp as milp_module
from tangram.solver.milp import MilpBackend, safe_horizon

SOLVERS = ["highs", "cbc"]
TICK = 0.1
PSPLIB = Path(__file__).resolve().parents[1] / "instances" / "psplib"


def _config(solver: str, **kw) -> SolveConfig:
    return SolveConfig(tick_s=TICK, milp_solver=solver, time_limit_s=20, num_workers=1, **kw)


def _solve(inst: Instance, solver: str, **kw):
    """Solve with the MILP alone; check the schedule and the objective the model claims."""
    compiled = compile_instance(inst, TICK)
    out = MilpBackend().solve(compiled, _config(solver, **kw), None)
    if not out.status.has_solution():
        return out, None
    schedule = to_schedule(compiled, out.plan)
    assert violations(inst, schedule) == []
    assert out.stats["objective"] == pytest.approx(evaluate(inst, schedule), abs=1e-6)
    assert out.bound is not None and out.bound <= evaluate(inst, schedule) + 1e-6
    return out, {a.action: a for a in schedule}


def _fixed(aid: str, duration_s: float, **mode) -> Action:
    kind = "cpu" if mode.get("cores") else ("api" if mode.get("quota") else "generic")
    return Action(id=aid, kind=kind, modes=(Mode(duration_s=duration_s, **mode),))


# --------------------------------------------------------------------------- constraint families


@pytest.mark.parametrize("solver", SOLVERS)
def test_node_cores_serialise(solver):
    """Three 2-core actions on a 3-core node run one at a time: ends 1, 2, 3."""
    inst = Instance(nodes=(CpuNode(id="n", cores=3),), actions=tuple(_fixed(f"a{i}", 1.0, cores=2) for i in range(3)))
    out, by = _solve(inst, solver)
    assert out.status == SolveStatus.OPTIMAL
    assert sorted(a.end_s for a in by.values()) == pytest.approx([1.0, 2.0, 3.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_node_memory(solver):
    """Cores would allow both at once; 6 + 6 GiB does not fit 10 GiB."""
    inst = Instance(nodes=(CpuNode(id="n", cores=8, memory_gb=10),),
                    actions=(_fixed("a", 1.0, cores=1, memory_gb=6), _fixed("b", 1.0, cores=1, memory_gb=6)))
    out, by = _solve(inst, solver)
    assert out.stats["objective"] == pytest.approx(3.0)
    assert by["a"].end_s <= by["b"].start_s + 1e-9 or by["b"].end_s <= by["a"].start_s + 1e-9


@pytest.mark.parametrize("solver", SOLVERS)
def test_elastic_modes_trade_cores_for_time(solver):
    """Alone on 4 cores, the fully parallel action takes all four (0.25 s)."""
    inst = Instance(nodes=(CpuNode(id="n", cores=4),),
                    actions=(Action(id="a", kind="cpu", elastic=Elastic(base_s=1.0, parallel_fraction=1.0)),))
    out, by = _solve(inst, solver)
    assert by["a"].placement.cores == 4 and by["a"].end_s == pytest.approx(0.3)  # 0.25 s rounds up to 3 ticks


@pytest.mark.parametrize("solver", SOLVERS)
def test_gpu_exclusive_and_running_occupancy(solver):
    """One GPU, busy until 1 s with a running action, then two 0.5 s scorings one after the other."""
    inst = Instance(gpus=(Gpu(id="g", type="H100", memory_gb=80, machine="m"),),
                    models=(RewardModel(id="rm", memory_gb=40, load_s=0.0),), resident={"g": ("rm",)},
                    running=(Running(action="old", end_s=1.0, gpus=("g",), model="rm"),),
                    actions=(Action(id="a", kind="gpu", model="rm", work_s=0.5),
                             Action(id="b", kind="gpu", model="rm", work_s=0.5)))
    out, by = _solve(inst, solver)
    assert sorted(a.end_s for a in by.values()) == pytest.approx([1.5, 2.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_quota_concurrency(solver):
    inst = Instance(quotas=(ApiQuota(id="q", concurrency=1),),
                    actions=(_fixed("a", 1.0, quota="q"), _fixed("b", 1.0, quota="q")))
    out, by = _solve(inst, solver)
    assert sorted(a.end_s for a in by.values()) == pytest.approx([1.0, 2.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_quota_rate_needs_a_horizon_beyond_the_durations(solver):
    """One call per 1 s window: 0.1 s calls start at 0, 1, 2 (far past the sum of durations)."""
    inst = Instance(quotas=(ApiQuota(id="q", concurrency=5, calls_per_window=1, window_s=1.0),),
                    actions=tuple(_fixed(f"a{i}", 0.1, quota="q") for i in range(3)))
    assert safe_horizon(compile_instance(inst, TICK)) >= 21
    out, by = _solve(inst, solver)
    assert out.status == SolveStatus.OPTIMAL
    assert sorted(a.start_s for a in by.values()) == pytest.approx([0.0, 1.0, 2.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_renewable(solver):
    inst = Instance(renewables=(Renewable(id="r", capacity=3),),
                    actions=tuple(_fixed(f"a{i}", 1.0, renewable={"r": 2}) for i in range(2)))
    out, by = _solve(inst, solver)
    assert out.stats["objective"] == pytest.approx(3.0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_model_residency_memory_and_load(solver):
    """g0 holds model A (60 of 80 GiB), so B (30 GiB) goes to g1 and waits for its 0.5 s load."""
    inst = Instance(gpus=(Gpu(id="g0", type="H100", memory_gb=80, machine="m"),
                          Gpu(id="g1", type="H100", memory_gb=80, machine="m")),
                    models=(RewardModel(id="A", memory_gb=60, load_s=2.0), RewardModel(id="B", memory_gb=30, load_s=0.5)),
                    resident={"g0": ("A",)},
                    actions=(Action(id="a", kind="gpu", model="A", work_s=1.0),
                             Action(id="b", kind="gpu", model="B", work_s=1.0)))
    out, by = _solve(inst, solver)
    assert by["a"].placement.gpus == ("g0",) and by["a"].start_s == pytest.approx(0.0)
    assert by["b"].placement.gpus == ("g1",) and by["b"].start_s == pytest.approx(0.5)


@pytest.mark.parametrize("solver", SOLVERS)
def test_precedence_with_lag(solver):
    inst = Instance(nodes=(CpuNode(id="n", cores=8),),
                    actions=(_fixed("a", 1.0, cores=1), Action(id="b", kind="cpu", after=(Lag(action="a", lag_s=0.5),),
                                                               modes=(Mode(duration_s=1.0, cores=1),))))
    out, by = _solve(inst, solver)
    assert by["b"].start_s == pytest.approx(1.5)


@pytest.mark.parametrize("solver", SOLVERS)
def test_deadline_infeasible(solver):
    """Two 1 s actions on one core cannot both end by 1.5 s."""
    actions = tuple(Action(id=f"a{i}", kind="cpu", deadline_s=1.5, modes=(Mode(duration_s=1.0, cores=1),))
                    for i in range(2))
    inst = Instance(nodes=(CpuNode(id="n", cores=1),), actions=actions)
    out, _ = _solve(inst, solver)
    assert out.status == SolveStatus.INFEASIBLE and out.plan is None


def test_deadline_no_option_is_infeasible_before_solving():
    inst = Instance(nodes=(CpuNode(id="n", cores=1),),
                    actions=(Action(id="a", kind="cpu", release_s=1.0, deadline_s=1.5,
                                    modes=(Mode(duration_s=1.0, cores=1),)),))
    out, _ = _solve(inst, "cbc")
    assert out.status == SolveStatus.INFEASIBLE and "a: no option fits" in out.message


# --------------------------------------------------------------------------- objective


def _mixed(**objective) -> Instance:
    """CPU, GPU (two models, two degrees), API with a rate, a lag and two tasks."""
    return Instance(
        nodes=(CpuNode(id="n0", cores=4, memory_gb=16),),
        gpus=(Gpu(id="g0", type="H100", memory_gb=80, machine="m0"), Gpu(id="g1", type="H100", memory_gb=80, machine="m0")),
        quotas=(ApiQuota(id="q", concurrency=2, calls_per_window=1, window_s=1.0),),
        models=(RewardModel(id="rm", memory_gb=60, load_s=0.5,
                            parallelism=(Parallelism(gpus=1, speedup=1), Parallelism(gpus=2, speedup=1.6))),
                RewardModel(id="rm2", memory_gb=30, load_s=0.3)),
        resident={"g0": ("rm",)},
        actions=(
            Action(id="c1", kind="cpu", elastic=Elastic(base_s=1.0, parallel_fraction=0.8, cores=(1, 2, 4), memory_gb=4)),
            Action(id="c2", kind="cpu", release_s=0.2, weight=2,
                   elastic=Elastic(base_s=2.0, parallel_fraction=0.5, cores=(1, 2, 4))),
            Action(id="r1", kind="gpu", model="rm", work_s=1.0),
            Action(id="r2", kind="gpu", model="rm", work_s=0.6, after=(Lag(action="c1", lag_s=0.3),)),
            Action(id="r3", kind="gpu", model="rm2", work_s=0.4, task="t2"),
            Action(id="a1", kind="api", quota="q", task="t2", modes=(Mode(duration_s=0.2),)),
            Action(id="a2", kind="api", quota="q", modes=(Mode(duration_s=0.2),)),
        ),
        objective=Objective(**objective),
    )


OBJECTIVES = {
    "all": dict(weighted_act=1, makespan=0.5, model_load=0.2, resource_seconds=0.01, fairness=0.3),
    "makespan": dict(weighted_act=0, makespan=1),
    "load": dict(weighted_act=0.1, model_load=1),
    "resources": dict(weighted_act=0.1, resource_seconds=1),
    "fairness": dict(weighted_act=0, fairness=1),
}


@pytest.mark.parametrize("terms", OBJECTIVES, ids=str)
def test_objective_matches_evaluate_and_solvers_agree(terms):
    inst = _mixed(**OBJECTIVES[terms])
    highs, _ = _solve(inst, "highs")
    cbc, _ = _solve(inst, "cbc")
    assert highs.status == cbc.status == SolveStatus.OPTIMAL
    assert highs.stats["objective"] == pytest.approx(cbc.stats["objective"], abs=1e-5)


def test_resource_objective_prefers_fewer_cores():
    """Amdahl with p = 0.5: one core holds 1 core-second, four hold 2.5 core-seconds."""
    inst = Instance(nodes=(CpuNode(id="n", cores=4),), objective=Objective(weighted_act=0, resource_seconds=1),
                    actions=(Action(id="a", kind="cpu", elastic=Elastic(base_s=1.0, parallel_fraction=0.5)),))
    _, by = _solve(inst, "highs")
    assert by["a"].placement.cores == 1


# --------------------------------------------------------------------------- front door, size, warm start


def test_front_door_warm_start_and_attempts():
    inst = _mixed(weighted_act=1)
    result = solve(inst, "milp", _config("cbc"))
    assert result.status == SolveStatus.OPTIMAL and result.solver == "milp"
    assert result.attempts[-1].solver == "milp" and result.bound == pytest.approx(result.objective, abs=1e-5)
    assert violations(inst, result.schedule) == []


@pytest.mark.parametrize("solver", SOLVERS)
def test_warm_start_from_a_feasible_plan(solver):
    """The serial plan is feasible; the solver starts from it and improves on it."""
    inst = Instance(nodes=(CpuNode(id="n", cores=4),), actions=tuple(_fixed(f"a{i}", 1.0, cores=1) for i in range(4)))
    compiled = compile_instance(inst, TICK)
    serial = Plan([(0, 10 * i) for i in range(4)])
    out = MilpBackend().solve(compiled, _config(solver), serial)
    assert out.stats["warm_start"] is True and out.status == SolveStatus.OPTIMAL
    assert out.stats["objective"] == pytest.approx(4.0)
    off_grid = Plan([(0, 10_000)] * 4)
    out = MilpBackend().solve(compiled, _config(solver), off_grid)
    assert out.stats["warm_start"] is False and "outside the time grid" in out.message


def test_too_large_is_refused_fast_and_falls_back():
    acts = tuple(Action(id=f"a{i}", kind="cpu", elastic=Elastic(base_s=5.0, parallel_fraction=0.9))
                 for i in range(200))
    inst = Instance(nodes=(CpuNode(id="n", cores=16),), actions=acts)
    t0 = time.perf_counter()
    out = MilpBackend().solve(compile_instance(inst, 0.01), SolveConfig(tick_s=0.01), None)
    assert time.perf_counter() - t0 < 5.0
    assert out.status == SolveStatus.ERROR and out.plan is None
    assert "too large for the time-indexed MILP" in out.message and "cpsat" in out.message
    assert "coarser tick_s" in out.message
    result = solve(inst, "milp", SolveConfig(tick_s=0.01, fallback=("greedy",)))
    assert result.solver == "greedy" and result.status == SolveStatus.FEASIBLE


def test_nonzero_limit():
    inst = Instance(nodes=(CpuNode(id="n", cores=1),), actions=tuple(_fixed(f"a{i}", 1.0, cores=1) for i in range(6)))
    out = MilpBackend(max_nonzeros=100).solve(compile_instance(inst, TICK), _config("cbc"), None)
    assert out.status == SolveStatus.ERROR and "nonzeros > 100" in out.message


def test_running_overload_is_infeasible():
    inst = Instance(nodes=(CpuNode(id="n", cores=2),), running=(Running(action="old", end_s=1.0, node="n", cores=3),),
                    actions=(_fixed("a", 1.0, cores=1),))
    out, _ = _solve(inst, "cbc")
    assert out.status == SolveStatus.INFEASIBLE and "running actions alone" in out.message


def test_highs_missing_falls_back_to_cbc(monkeypatch):
    monkeypatch.setattr(milp_module, "highs_available", lambda: False)
    out, _ = _solve(_mixed(weighted_act=1), "highs")
    assert out.status == SolveStatus.OPTIMAL and out.stats["solver"] == "cbc" and "solved with CBC" in out.message


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_time_limit_keeps_a_solution_and_a_true_bound(solver):
    """Sixteen elastic actions in 1 s: a solution (warm start), a bound below it, never a false OPTIMAL."""
    acts = tuple(Action(id=f"c{i}", kind="cpu", release_s=0.5 * (i % 3), weight=1 + i % 3,
                        elastic=Elastic(base_s=0.3 + 0.1 * i, parallel_fraction=0.7, cores=(1, 2, 4)))
                 for i in range(16))
    inst = Instance(nodes=(CpuNode(id="n", cores=4),), actions=acts, objective=Objective(weighted_act=1, makespan=1))
    result = solve(inst, "milp", SolveConfig(tick_s=TICK, milp_solver=solver, time_limit_s=1.0, num_workers=1,
                                             fallback=()))
    assert result.status in (SolveStatus.FEASIBLE, SolveStatus.OPTIMAL) and result.solver == "milp"
    assert violations(inst, result.schedule) == []
    if result.bound is not None:
        assert result.bound <= result.objective + 1e-6
    milp = result.attempts[-1]
    assert milp.runtime_s < 5.0


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_psplib_j30_known_optimum(solver):
    """PSPLIB j301_1 (30 jobs, 4 renewables): optimal makespan 43."""
    from tangram.io.psplib import read_psplib

    inst = read_psplib(PSPLIB / "j301_1.sm")
    result = solve(inst, "milp", SolveConfig(tick_s=1.0, milp_solver=solver, time_limit_s=60, fallback=()))
    assert result.status == SolveStatus.OPTIMAL and result.objective == pytest.approx(43.0)
    assert violations(inst, result.schedule) == []


def test_cbc_crash_with_a_mip_start_is_retried_cold(monkeypatch):
    """CBC 2.10 may segfault when stopping on time with a MIP start; the backend then solves cold."""
    real = milp_module._run_cbc
    calls = []

    def crash_when_warm(model, config, budget, warm):
        calls.append(warm)
        if warm:
            raise milp_module.pulp.PulpSolverError("Pulp: Error while trying to execute")
        return real(model, config, budget, warm)

    monkeypatch.setattr(milp_module, "_run_cbc", crash_when_warm)
    inst = Instance(nodes=(CpuNode(id="n", cores=1),), actions=tuple(_fixed(f"a{i}", 1.0, cores=1) for i in range(2)))
    out = MilpBackend().solve(compile_instance(inst, TICK), _config("cbc"), Plan([(0, 0), (0, 10)]))
    assert calls == [True, False] and out.status == SolveStatus.OPTIMAL and "solved cold" in out.message


@pytest.mark.parametrize("seed", range(3))
def test_never_worse_than_greedy(seed):
    """Random CPU / API / renewable instances: the proven optimum is at most the greedy plan's objective."""
    import random

    rng = random.Random(seed)
    actions = []
    for i in range(6):
        kind = rng.choice(["cpu", "api", "generic"])
        release = rng.choice([0.0, 0.3, 0.6])
        if kind == "cpu":
            actions.append(Action(id=f"a{i}", kind="cpu", release_s=release, weight=rng.choice([1, 2]),
                                  elastic=Elastic(base_s=rng.uniform(0.2, 1.0), parallel_fraction=0.6, cores=(1, 2))))
        elif kind == "api":
            actions.append(_fixed(f"a{i}", rng.uniform(0.1, 0.5), quota="q").model_copy(update={"release_s": release}))
        else:
            actions.append(_fixed(f"a{i}", rng.uniform(0.1, 0.5), renewable={"r": 2}))
    inst = Instance(nodes=(CpuNode(id="n", cores=2),), renewables=(Renewable(id="r", capacity=3),),
                    quotas=(ApiQuota(id="q", concurrency=1, calls_per_window=2, window_s=0.5),), actions=tuple(actions))
    greedy = solve(inst, "greedy", _config("highs"))
    exact = solve(inst, "milp", _config("highs", fallback=()))
    assert exact.status == SolveStatus.OPTIMAL and violations(inst, exact.schedule) == []
    assert exact.objective <= greedy.objective + 1e-6
