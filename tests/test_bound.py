"""The relaxation bound: tight where the theory says so, never above an optimum."""

from __future__ import annotations

import pytest
from hypothesis import given
from test_properties import SETTINGS

from tangram import SolveConfig, solve
from tangram.model.compiled import compile_instance
from tangram.model.instance import Action, CpuNode, Instance, Mode, Running
from tangram.solver.bound import earliest_completions, lower_bound

from cases import BRUTE, FEASIBLE, brute_force_horizon, brute_force_optimum, gpu_residency, instances


def queue(jobs: int, cores: int = 1, running_end: float | None = None) -> Instance:
    """``jobs`` one-second single-core jobs on one node: a pure queue."""
    running = (Running(action="r", node="n0", cores=cores, end_s=running_end),) if running_end else ()
    return Instance(name="queue", nodes=(CpuNode(id="n0", cores=cores),), running=running,
                    actions=tuple(Action(id=f"a{k}", kind="cpu", modes=(Mode(duration_s=1.0, cores=1),))
                                  for k in range(jobs)))


def test_fluid_bound_is_tight_on_a_single_machine_queue():
    """Σ C = 1 + 2 + 3 + 4: the mean-busy-time relaxation is exact for equal unit jobs."""
    assert lower_bound(compile_instance(queue(4), 0.1)) == pytest.approx(10.0)


def test_running_actions_delay_the_fluid_pool():
    """The node is fully held until 2 s, so the queue shifts by 2 s per job."""
    assert lower_bound(compile_instance(queue(2, running_end=2.0), 0.1)) == pytest.approx(3.0 + 4.0)


def test_earliest_completion_pays_the_model_load():
    c = compile_instance(gpu_residency(), 0.1)
    ends = earliest_completions(c)
    assert ends[0] == 4  # 0.4 s of work on the GPU where the model is resident


@pytest.mark.parametrize("make", BRUTE, ids=lambda f: f.__name__)
def test_bound_never_exceeds_the_brute_force_optimum(make):
    instance = make()
    optimum = brute_force_optimum(instance, 0.1, brute_force_horizon(instance))
    assert lower_bound(compile_instance(instance, 0.1)) <= optimum + 1e-9


@pytest.mark.parametrize("make", FEASIBLE, ids=lambda f: f.__name__)
def test_bound_below_every_backend(make):
    instance = make()
    c = compile_instance(instance, 0.1)
    bound = lower_bound(c)
    for solver in ("greedy", "cpsat"):
        result = solve(instance, solver, SolveConfig(tick_s=0.1, time_limit_s=5, deterministic=True))
        assert bound <= result.objective + 1e-6


@SETTINGS
@given(instances())
def test_bound_below_greedy_on_generated_instances(instance):
    result = solve(instance, "greedy", SolveConfig(tick_s=0.1))
    assert result.bound is not None and result.bound <= result.objective + 1e-6
