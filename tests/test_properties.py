"""Properties over hypothesis-generated instances."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tangram import SolveConfig, evaluate, solve, violations
from tangram.model.instance import (
    Action, ApiQuota, CpuNode, Elastic, Gpu, Instance, Lag, Mode, Objective, Parallelism, RewardModel, Sandbox,
)

TICK = 0.1


@st.composite
def instances(draw) -> Instance:
    """Small mixed instances: 1-2 nodes, 0-2 GPUs with a model, one quota, 1-6 actions."""
    n_nodes = draw(st.integers(1, 2))
    nodes = tuple(CpuNode(id=f"n{k}", cores=draw(st.sampled_from([1, 2, 4])), memory_gb=8) for k in range(n_nodes))
    n_gpus = draw(st.integers(0, 2))
    gpus = tuple(Gpu(id=f"g{k}", type="A100", memory_gb=40, machine="m0") for k in range(n_gpus))
    models = (RewardModel(id="rm", memory_gb=20, load_s=draw(st.sampled_from([0.0, 0.3])),
                          parallelism=(Parallelism(gpus=1, speedup=1.0),)),) if n_gpus else ()
    resident = {"g0": ("rm",)} if n_gpus and draw(st.booleans()) else {}
    quota = ApiQuota(id="api", concurrency=draw(st.integers(1, 2)), calls_per_window=draw(st.sampled_from([None, 1, 2])),
                     window_s=0.5)
    sandboxes = (Sandbox(id="sb", node="n0", memory_gb=1),)
    actions = []
    for k in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["cpu", "cpu", "api"] + (["gpu"] if n_gpus else [])))
        release = draw(st.sampled_from([0.0, 0.2, 0.5]))
        weight = draw(st.sampled_from([1.0, 2.0]))
        after = (Lag(action=f"a{k - 1}", lag_s=0.1),) if k and draw(st.booleans()) else ()
        common = dict(id=f"a{k}", kind=kind, release_s=release, weight=weight, after=after, task=f"t{k % 2}")
        if kind == "cpu":
            base = draw(st.sampled_from([0.2, 0.4, 0.7]))
            if draw(st.booleans()):
                actions.append(Action(**common, sandbox="sb", elastic=Elastic(base_s=base, parallel_fraction=0.6,
                                                                              cores=(1, 2), memory_gb=1)))
            else:
                actions.append(Action(**common, modes=(Mode(duration_s=base, cores=1),)))
        elif kind == "gpu":
            actions.append(Action(**common, model="rm", work_s=draw(st.sampled_from([0.2, 0.5]))))
        else:
            actions.append(Action(**common, quota="api", modes=(Mode(duration_s=0.3),)))
    objective = draw(st.sampled_from([Objective(), Objective(weighted_act=0, makespan=1),
                                      Objective(weighted_act=1, fairness=0.5, model_load=0.2)]))
    return Instance(name="generated", nodes=nodes, gpus=gpus, models=models, resident=resident, quotas=(quota,),
                    sandboxes=sandboxes, actions=tuple(actions), objective=objective)


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
