"""One conformance suite, parametrised over every registered backend."""

from __future__ import annotations

import pytest

from tangram import SolveConfig, SolveStatus, evaluate, solve, violations
from tangram.model.compiled import compile_instance
from tangram.solver import BACKENDS, backend, to_schedule
from tangram.workload.epoch import realistic_epoch

from cases import BRUTE, FEASIBLE, brute_force_horizon, brute_force_optimum, infeasible_deadline

EXACT = [n for n in BACKENDS if backend(n).exact]
TICK = 0.1
CONFIG = SolveConfig(time_limit_s=20, tick_s=TICK, deterministic=True, fallback=())


@pytest.mark.parametrize("solver", list(BACKENDS))
def test_feasible_schedule_passes_the_checker(solver, feasible_instance):
    result = solve(feasible_instance, solver=solver, config=CONFIG)
    assert result.status.has_solution(), result.attempts
    assert result.solver == solver
    assert violations(feasible_instance, result.schedule) == []
    assert result.objective == pytest.approx(evaluate(feasible_instance, result.schedule))
    if result.bound is not None:
        assert result.bound <= result.objective + 1e-6


@pytest.mark.parametrize("solver", EXACT)
def test_exact_backends_prove_infeasibility(solver):
    result = solve(infeasible_deadline(), solver=solver, config=CONFIG)
    assert result.status == SolveStatus.INFEASIBLE
    assert result.schedule == ()
    assert not result.status.has_solution()


def test_greedy_reports_no_solution_when_it_misses_a_deadline():
    result = solve(infeasible_deadline(), solver="greedy", config=CONFIG)
    assert result.status == SolveStatus.NO_SOLUTION_IN_TIME
    assert "deadline" in result.attempts[-1].message


@pytest.mark.parametrize("solver", EXACT)
def test_exact_backends_never_lose_to_their_greedy_hint(solver, feasible_instance):
    compiled = compile_instance(feasible_instance, TICK)
    hint = backend("greedy").solve(compiled, CONFIG, None).plan
    greedy_objective = evaluate(feasible_instance, to_schedule(compiled, hint))
    result = solve(compiled, solver=solver, config=CONFIG, initial=hint)
    assert result.status.has_solution()
    assert result.objective <= greedy_objective + 1e-6


@pytest.mark.parametrize("solver", EXACT)
def test_time_limit_is_respected(solver):
    instance = realistic_epoch(actions=60, nodes=6, gpus=8, seed=3)
    config = SolveConfig(time_limit_s=1.0, tick_s=0.5, fallback=("greedy",))
    result = solve(instance, solver=solver, config=config)
    attempt = next(a for a in result.attempts if a.solver == solver)
    assert attempt.runtime_s < 1.0 + 4.0  # budget plus model building; a hung solver fails this
    assert result.status.has_solution()  # at worst the greedy fallback
    assert violations(instance, result.schedule) == []


def test_fallback_chain_records_every_attempt():
    config = SolveConfig(time_limit_s=5, tick_s=TICK, fallback=("greedy",))
    result = solve(infeasible_deadline(), solver="greedy", config=config)
    assert [a.solver for a in result.attempts] == ["greedy"]
    result = solve(FEASIBLE[0](), solver="cpsat", config=config)
    assert [a.solver for a in result.attempts][:2] == ["greedy", "cpsat"]
    assert result.solver == "cpsat"


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend 'gurobi'"):
        solve(FEASIBLE[0](), solver="gurobi")


# ----------------------------------------------------------------------------- brute force


@pytest.mark.slow
@pytest.mark.parametrize("make", BRUTE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("solver", EXACT)
def test_exact_backends_prove_the_brute_force_optimum(solver, make):
    instance = make()
    optimum = brute_force_optimum(instance, TICK, horizon=brute_force_horizon(instance))
    result = solve(instance, solver=solver, config=CONFIG)
    assert result.status == SolveStatus.OPTIMAL
    assert result.objective == pytest.approx(optimum, abs=1e-6)
    assert result.bound == pytest.approx(optimum, abs=1e-4)
