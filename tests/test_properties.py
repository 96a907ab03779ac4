"""Properties over hypothesis-generated instances."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tangram import SolveConfig, evaluate, solve, violations

from cases import instances

TICK = 0.1


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(instances())
def test_greedy_schedule_is_always_feasible(instance):
    result = solve(instance, solver="greedy", config=SolveConfig(tick_s=TICK))
    assert result.status.has_solution()
    assert violations(instance, result.schedule) == []
    assert result.objective == pytest.approx(evaluate(instance, result.schedule))


@pytest.mark.slow
@SETTINGS
@given(instances())
def test_cpsat_is_feasible_and_greedy_never_beats_its_bound(instance):
    config = SolveConfig(tick_s=TICK, time_limit_s=5, deterministic=True, fallback=())
    result = solve(instance, solver="cpsat", config=config)
    assert result.status.has_solution()
    assert violations(instance, result.schedule) == []
    greedy = solve(instance, solver="greedy", config=config)
    assert result.bound is not None
    assert greedy.objective >= result.bound - 1e-6
    assert result.objective <= greedy.objective + 1e-6


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_milp_schedule_passes_the_checker(instance):
    config = SolveConfig(tick_s=TICK, time_limit_s=10, fallback=())
    result = solve(instance, solver="milp", config=config)
    assert result.status.has_solution()
    assert violations(instance, result.schedule) == []
