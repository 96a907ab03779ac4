"""Small named instances, each with the rule it exercises in its docstring."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from tangram import evaluate, violations
from tangram.model.compiled import compile_instance
from tangram.model.instance import (
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
    RewardModel,
    Running,
    Sandbox,
)
from tangram.solver import to_schedule
from tangram.solver.base import Plan

TICK = 0.1


def two_jobs_one_core() -> Instance:
    """Two 1 s jobs on one single-core node: they must run back to back (optimum ACT sum 3)."""
    return Instance(
        name="two_jobs_one_core",
        nodes=(CpuNode(id="n0", cores=1),),
        actions=tuple(Action(id=f"a{k}", kind="cpu", modes=(Mode(duration_s=1.0, cores=1),)) for k in range(2)),
    )


def elastic_pair() -> Instance:
    """Two elastic jobs on a 4-core node: the mode choice trades cores against time."""
    return Instance(
        name="elastic_pair",
        nodes=(CpuNode(id="n0", cores=4, memory_gb=16),),
        sandboxes=(Sandbox(id="sb", node="n0", memory_gb=2),),
        actions=(
            Action(id="big", kind="cpu", sandbox="sb", elastic=Elastic(base_s=0.8, parallel_fraction=0.9, cores=(1, 2, 4))),
            Action(id="small", kind="cpu", sandbox="sb", elastic=Elastic(base_s=0.3, parallel_fraction=0.5, cores=(1, 2))),
        ),
    )


def gpu_residency() -> Instance:
    """Two GPUs, one with the model resident, one needing a 0.5 s load; 1- or 2-GPU modes."""
    return Instance(
        name="gpu_residency",
        gpus=(Gpu(id="g0", type="A100", memory_gb=80, machine="m0"),
              Gpu(id="g1", type="A100", memory_gb=80, machine="m0")),
        models=(RewardModel(id="rm", memory_gb=30, load_s=0.5,
                            parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.6))),),
        resident={"g0": ("rm",)},
        actions=tuple(Action(id=f"s{k}", kind="gpu", model="rm", work_s=0.4 + 0.2 * k) for k in range(3)),
    )


def quota_rate() -> Instance:
    """Four API calls, concurrency 2 and at most 2 starts per 1 s window."""
    return Instance(
        name="quota_rate",
        quotas=(ApiQuota(id="search", concurrency=2, calls_per_window=2, window_s=1.0),),
        actions=tuple(Action(id=f"q{k}", kind="api", quota="search", modes=(Mode(duration_s=0.2),)) for k in range(4)),
    )


def chain_with_lag() -> Instance:
    """A trajectory: code, then (after 0.3 s of LLM think time) code again, plus a running action."""
    return Instance(
        name="chain_with_lag",
        nodes=(CpuNode(id="n0", cores=2),),
        running=(Running(action="r0", node="n0", cores=1, end_s=0.5),),
        actions=(
            Action(id="c0", kind="cpu", modes=(Mode(duration_s=0.4, cores=1), Mode(duration_s=0.3, cores=2))),
            Action(id="c1", kind="cpu", after=(Lag(action="c0", lag_s=0.3),), modes=(Mode(duration_s=0.2, cores=1),)),
            Action(id="c2", kind="cpu", weight=2.0, modes=(Mode(duration_s=0.2, cores=1),)),
        ),
    )


def makespan_mix() -> Instance:
    """CPU, GPU and API work under a makespan + resource-seconds objective."""
    return Instance(
        name="makespan_mix",
        nodes=(CpuNode(id="n0", cores=2),),
        gpus=(Gpu(id="g0", type="L40", memory_gb=48, machine="m0", speed=0.5),),
        quotas=(ApiQuota(id="judge", concurrency=1),),
        models=(RewardModel(id="rm", memory_gb=20, load_s=0.2),),
        objective=Objective(weighted_act=0.0, makespan=1.0, resource_seconds=0.1, model_load=1.0),
        actions=(
            Action(id="c", kind="cpu", elastic=Elastic(base_s=0.6, parallel_fraction=0.8, cores=(1, 2))),
            Action(id="g", kind="gpu", model="rm", work_s=0.2),
            Action(id="j", kind="api", quota="judge", modes=(Mode(duration_s=0.3),)),
        ),
    )


def infeasible_deadline() -> Instance:
    """Two 1 s jobs on one core, both due at 1.5 s: no schedule exists."""
    return Instance(
        name="infeasible_deadline",
        nodes=(CpuNode(id="n0", cores=1),),
        actions=tuple(Action(id=f"a{k}", kind="cpu", deadline_s=1.5, modes=(Mode(duration_s=1.0, cores=1),))
                      for k in range(2)),
    )


FEASIBLE = [two_jobs_one_core, elastic_pair, gpu_residency, quota_rate, chain_with_lag, makespan_mix]



def brute_force_optimum(instance, tick: float, horizon: int) -> float:
    """Enumerate every (option, start tick) combination up to ``horizon``; keep the best feasible."""
    compiled = compile_instance(instance, tick)
    choices = [[(k, t) for k in range(len(compiled.options(i))) for t in range(horizon + 1)]
               for i in range(compiled.num_actions)]
    best = float("inf")
    for combo in itertools.product(*choices):
        schedule = to_schedule(compiled, Plan(list(combo)))
        if not violations(instance, schedule):
            best = min(best, evaluate(instance, schedule))
    return best


BRUTE = [two_jobs_one_core, quota_rate, chain_with_lag]  # small enough to enumerate at 0.1 s ticks


def brute_force_horizon(instance) -> int:
    """Ticks by which some optimal schedule of these tiny instances has started everything."""
    return {"two_jobs_one_core": 12, "quota_rate": 12, "chain_with_lag": 12}[instance.name]


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
