"""GPU capacity planner: the pure decision and its glue in the controller."""

from pathlib import Path

import pytest

from tangram.model.compiled import compile_instance
from tangram.model.instance import Action, Gpu, Instance, Parallelism, RewardModel
from tangram.runtime.controller import ControllerConfig
from tangram.runtime.planner import (
    Demand,
    PlannerContext,
    delay_s,
    plan_capacity,
    planned_policy,
    restrict_degree,
)
from tangram.runtime.sim import simulate
from tangram.workload.scenario import load_scenario

RM = RewardModel(id="rm", memory_gb=20, load_s=10.0,
                 parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.8),
                              Parallelism(gpus=4, speedup=3.2)))
SMALL = RewardModel(id="small", memory_gb=10, load_s=5.0)


def test_delay_falls_with_replicas_and_overload_costs_the_horizon():
    d = Demand(rate=1.0, work_s=2.0)
    assert delay_s(d, 1, 1, 1.0, 60) == 60 * 60  # rho = 2: overloaded
    assert delay_s(d, 3, 1, 1.0, 60) > delay_s(d, 4, 1, 1.0, 60) > delay_s(d, 8, 1, 1.0, 60) > 60 * 2.0
    assert delay_s(Demand(0.0, 2.0), 1, 1, 1.0, 60) == 0.0


def test_plan_fits_the_budget_and_follows_demand():
    ctx = PlannerContext({"rm": Demand(2.0, 2.0), "small": Demand(0.1, 1.0)}, {}, {"rm": RM, "small": SMALL}, 8)
    plan = plan_capacity(ctx)
    used = {m: r * d for m, (r, d) in plan.allocation.items()}
    assert sum(used.values()) <= 8 and used["rm"] > used["small"] >= 1
    assert plan.apply and plan.cost_s < plan.current_cost_s and set(plan.changed) == {"rm", "small"}
    again = plan_capacity(PlannerContext(ctx.demand, plan.allocation, ctx.models, 8))
    assert not again.apply and again.changed == ()  # nothing to gain
    # light demand: one replica at a high degree serves each action fastest
    light = plan_capacity(PlannerContext({"rm": Demand(0.01, 2.0)}, {}, {"rm": RM}, 8))
    assert light.allocation["rm"][1] == 4


def test_switching_cost_beats_a_small_gain():
    models = {"rm": RM.model_copy(update={"load_s": 1000.0})}
    cur = {"rm": (2, 1)}
    ctx = PlannerContext({"rm": Demand(0.5, 2.0)}, cur, models, 8, margin=1.0)
    plan = plan_capacity(ctx)
    assert plan.cost_s < plan.current_cost_s and not plan.apply
    assert plan_capacity(PlannerContext(ctx.demand, cur, {"rm": RM}, 8, margin=0.0)).apply


def test_restrict_degree_keeps_mode_indices_and_blocks_the_others():
    gpus = tuple(Gpu(id=f"g{i}", type="H100", memory_gb=80, machine="m0") for i in range(4))
    a = Action(id="s", kind="gpu", model="rm", work_s=3.2)
    r = restrict_degree(a, RM, 2)
    assert [m.gpus for m in r.modes] == [1, 2, 4] and r.modes[2].duration_s == pytest.approx(1.0)
    c = compile_instance(Instance.model_construct(**{**Instance(gpus=gpus, models=(RM,)).__dict__, "actions": (r,)}))
    assert {o.mode for o in c.options(0)} == {1}


def test_planned_controller_in_the_simulator():
    s = load_scenario(Path(__file__).resolve().parent.parent / "instances" / "scenarios" / "quick.toml")
    s = s.model_copy(update={"batch": 12})
    w, fleet = s.workload(), s.build_fleet()
    run = simulate(w, fleet, planned_policy(ControllerConfig(deterministic=True), period_s=5.0, window_s=30.0))
    assert len(run.records) == w.num_actions
    plans = [e for e in run.events if e["type"] == "plan"]
    assert plans
    degree = {m: d for m, (_, d) in plans[0]["allocation"].items()}
    later = [r for r in run.records if r.kind == "gpu" and r.dispatch_s > plans[0]["t"]
             and (not plans[1:] or r.dispatch_s < plans[1]["t"])]
    models = {f"{t.id}/{k}": st.action.model for t in w.trajectories for k, st in enumerate(t.steps)}
    for r in later:
        if models[r.action] in degree:
            assert len(r.gpus) == degree[models[r.action]]
