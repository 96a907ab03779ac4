"""The CP-SAT backend on small named instances, one per constraint family.

Every solved schedule goes through the checker: no violations, the solver's
objective equals evaluate() and its bound never exceeds it.
"""

from __future__ import annotations

import random

import pytest

from tangram.model.check import evaluate, violations
from tangram.model.compiled import compile_instance
from tangram.model.instance import (
    Action,
    ApiQuota,
    Constraints,
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
    Sandbox,
)
from tangram.model.schedule import SolveStatus
from tangram.solver import SolveConfig, solve, to_schedule
from tangram.solver.cpsat import CpSatBackend, integer_scale, window_of
from tangram.solver.greedy import GreedyBackend

pytest.importorskip("ortools")

EXACT = SolveConfig(deterministic=True, time_limit_s=5.0)


def run(inst: Instance, config: SolveConfig = EXACT, hint: bool = False):
    """Solve with CP-SAT alone; check the schedule and the reported numbers."""
    c = compile_instance(inst, config.tick_s)
    initial = GreedyBackend().solve(c, config).plan if hint else None
    out = CpSatBackend().solve(c, config, initial)
    if out.plan is None:
        return out, None
    schedule = to_schedule(c, out.plan)
    assert violations(inst, schedule) == []
    value = evaluate(inst, schedule)
    assert out.stats["objective"] == pytest.approx(value, rel=1e-6, abs=1e-6)
    if out.bound is not None:
        assert out.bound <= value + 1e-6 * max(1.0, abs(value))
    return out, {a.action: a for a in schedule}


def api(id: str, duration_s: float, quota: str = "q", **kw) -> Action:
    return Action(id=id, kind="api", quota=quota, modes=(Mode(duration_s=duration_s),), **kw)


def cpu(id: str, duration_s: float, cores: int = 1, **kw) -> Action:
    mode = Mode(duration_s=duration_s, cores=cores, memory_gb=kw.pop("memory_gb", 0.0))
    return Action(id=id, kind="cpu", modes=(mode,), **kw)


# ----------------------------------------------------------------------------- families


def test_quota_rate_spaces_call_starts():
    """One call per 1 s window: three 0.2 s calls start at 0, 1 and 2 s although
    the concurrency cap (3) would let them run together."""
    inst = Instance(quotas=(ApiQuota(id="q", concurrency=3, calls_per_window=1, window_s=1.0),),
                    actions=tuple(api(f"c{k}", 0.2) for k in range(3)))
    out, s = run(inst)
    assert out.status == SolveStatus.OPTIMAL
    assert sorted(a.start_s for a in s.values()) == pytest.approx([0.0, 1.0, 2.0])
    assert out.bound == pytest.approx(0.2 + 1.2 + 2.2)


def test_quota_concurrency_and_running_call():
    """Concurrency 1 and a call already in flight until 0.5 s: the next call waits."""
    inst = Instance(quotas=(ApiQuota(id="q", concurrency=1),), actions=(api("c", 0.3),),
                    running=(Running(action="r", end_s=0.5, quota="q"),))
    _, s = run(inst)
    assert s["c"].start_s == pytest.approx(0.5)


def _gpu_pair(load_weight: float) -> Instance:
    """g0 has the model resident but is busy until 5 s; g1 would load it in 2 s."""
    return Instance(
        gpus=(Gpu(id="g0", type="H100", memory_gb=80, machine="m0"),
              Gpu(id="g1", type="H100", memory_gb=80, machine="m0")),
        models=(RewardModel(id="rm", memory_gb=30, load_s=2.0),),
        resident={"g0": ("rm",)},
        running=(Running(action="r", end_s=5.0, gpus=("g0",), model="rm"),),
        actions=(Action(id="a", kind="gpu", model="rm", work_s=1.0),),
        objective=Objective(weighted_act=1.0, model_load=load_weight),
    )


def test_model_load_time_delays_first_use():
    """Loading on the idle GPU (start 2 s, end 3 s) beats waiting for the resident one."""
    out, s = run(_gpu_pair(load_weight=0.0))
    assert s["a"].placement.gpus == ("g1",)
    assert s["a"].start_s == pytest.approx(2.0)
    assert out.status == SolveStatus.OPTIMAL


def test_model_load_cost_prefers_resident_gpu():
    """With load seconds weighted 10x, waiting for the resident GPU is cheaper (6 < 3 + 20)."""
    out, s = run(_gpu_pair(load_weight=10.0))
    assert s["a"].placement.gpus == ("g0",)
    assert out.bound == pytest.approx(6.0)


def test_gpu_memory_limits_hosted_models():
    """Two 50 GiB models cannot share an 80 GiB GPU: the second goes to the slow GPU."""
    inst = Instance(
        gpus=(Gpu(id="fast", type="H100", memory_gb=80, machine="m0", speed=2.0),
              Gpu(id="slow", type="H100", memory_gb=80, machine="m0", speed=1.0)),
        models=(RewardModel(id="a", memory_gb=50, load_s=0.0), RewardModel(id="b", memory_gb=50, load_s=0.0)),
        actions=(Action(id="x", kind="gpu", model="a", work_s=1.0),
                 Action(id="y", kind="gpu", model="b", work_s=1.0)),
    )
    _, s = run(inst)
    assert {s["x"].placement.gpus, s["y"].placement.gpus} == {("fast",), ("slow",)}


def test_node_memory_serialises_actions():
    """3 GiB free (4 minus a 1 GiB sandbox) and two 2 GiB actions: one after the other."""
    inst = Instance(nodes=(CpuNode(id="n", cores=8, memory_gb=4.0),),
                    sandboxes=(Sandbox(id="s", node="n", memory_gb=1.0),),
                    actions=(cpu("a", 1.0, memory_gb=2.0, sandbox="s"), cpu("b", 1.0, memory_gb=2.0, sandbox="s")))
    out, s = run(inst)
    assert sorted([s["a"].start_s, s["b"].start_s]) == pytest.approx([0.0, 1.0])
    assert out.status == SolveStatus.OPTIMAL


def test_elastic_cores_trade_off():
    """Two Amdahl actions on 4 cores: both get 2 cores rather than one taking 4."""
    el = Elastic(base_s=4.0, parallel_fraction=1.0, cores=(1, 2, 4))
    inst = Instance(nodes=(CpuNode(id="n", cores=4),),
                    actions=(Action(id="a", kind="cpu", elastic=el), Action(id="b", kind="cpu", elastic=el)))
    out, s = run(inst)
    # 4 cores then 4 cores: ends 1 and 2 (sum 3) beat 2 + 2 cores together (sum 4).
    assert sorted(a.end_s for a in s.values()) == pytest.approx([1.0, 2.0])
    assert out.status == SolveStatus.OPTIMAL


def test_nvlink_gang_within_one_domain():
    """A 2-GPU mode gang-starts on one NVLink domain's block, after the running work there."""
    gpus = tuple(Gpu(id=f"g{k}", type="H100", memory_gb=80, machine="m0", nvlink_domain=f"d{k % 2}")
                 for k in range(4))
    inst = Instance(
        gpus=gpus,
        models=(RewardModel(id="rm", memory_gb=10, load_s=0.0,
                            parallelism=(Parallelism(gpus=2, speedup=2.0),)),),
        running=(Running(action="r1", end_s=3.0, gpus=("g1",)), Running(action="r2", end_s=3.0, gpus=("g2",))),
        actions=(Action(id="a", kind="gpu", model="rm", work_s=2.0),),
    )
    _, s = run(inst)
    domains = {g.id: g.domain_id for g in gpus}
    assert len({domains[g] for g in s["a"].placement.gpus}) == 1
    assert s["a"].start_s == pytest.approx(3.0) and s["a"].end_s == pytest.approx(4.0)


def test_precedence_lag():
    """b starts at least 2 s after a ends, even with a free second core."""
    inst = Instance(nodes=(CpuNode(id="n", cores=2),),
                    actions=(cpu("a", 1.0), cpu("b", 1.0, after=(Lag(action="a", lag_s=2.0),))))
    _, s = run(inst)
    assert s["b"].start_s == pytest.approx(3.0)


def test_deadline_infeasible():
    """One core, two 1 s actions, both due at 1.5 s: proven infeasible."""
    inst = Instance(nodes=(CpuNode(id="n", cores=1),),
                    actions=(cpu("a", 1.0, deadline_s=1.5), cpu("b", 1.0, deadline_s=1.5)))
    out, s = run(inst)
    assert out.status == SolveStatus.INFEASIBLE and s is None


def test_deadlines_switch_off():
    """The same instance with deadlines switched off is solved."""
    inst = Instance(nodes=(CpuNode(id="n", cores=1),), constraints=Constraints(deadlines=False),
                    actions=(cpu("a", 1.0, deadline_s=1.5), cpu("b", 1.0, deadline_s=1.5)))
    out, _ = run(inst)
    assert out.status == SolveStatus.OPTIMAL


def test_running_actions_hold_cores():
    """A running action holds both cores until 3 s; the pending one waits."""
    inst = Instance(nodes=(CpuNode(id="n", cores=2),), now_s=1.0,
                    running=(Running(action="r", end_s=3.0, node="n", cores=2),),
                    actions=(cpu("a", 1.0, release_s=1.0),))
    _, s = run(inst)
    assert s["a"].start_s == pytest.approx(3.0)


def test_renewable_capacity():
    """Renewable of capacity 2 and three 1-unit, 1 s generic actions: one runs second."""
    inst = Instance(renewables=(Renewable(id="r", capacity=2),),
                    actions=tuple(Action(id=f"a{k}", kind="generic", modes=(Mode(duration_s=1.0, renewable={"r": 1}),))
                                  for k in range(3)))
    out, s = run(inst)
    assert sorted(a.start_s for a in s.values()) == pytest.approx([0.0, 0.0, 1.0])
    assert out.bound == pytest.approx(4.0)


def test_every_objective_term_matches_evaluate():
    """All five terms weighted at once: the model's value equals evaluate()."""
    obj = Objective(weighted_act=1.0, makespan=2.0, model_load=0.5, resource_seconds=0.01, fairness=3.0)
    out, s = run(mixed(12, seed=3, objective=obj), SolveConfig(deterministic=True, time_limit_s=0.3))
    assert out.status.has_solution() and s is not None


def test_fairness_alone():
    """Only the fairness term: the largest task mean slowdown, as evaluate() computes it."""
    inst = Instance(nodes=(CpuNode(id="n", cores=1),), objective=Objective(weighted_act=0.0, fairness=1.0),
                    actions=(cpu("a", 1.0, task="t1"), cpu("b", 3.0, task="t2")))
    out, _ = run(inst)
    assert out.status == SolveStatus.OPTIMAL
    assert out.bound == pytest.approx(4.0 / 3.0, rel=1e-6)  # b first (slowdown 1), a ends at 4 s


# ----------------------------------------------------------------------------- solver behaviour


def mixed(n: int, seed: int = 0, objective: Objective | None = None) -> Instance:
    """A small epoch of CPU (elastic), GPU (two models, 1-4 GPUs) and API actions."""
    rng = random.Random(seed)
    gpus = tuple(Gpu(id=f"g{k}", type="H100", memory_gb=80, machine=f"m{k // 2}") for k in range(4))
    models = (RewardModel(id="small", memory_gb=20, load_s=1.0,
                          parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.8))),
              RewardModel(id="large", memory_gb=40, load_s=3.0,
                          parallelism=(Parallelism(gpus=2, speedup=1.0), Parallelism(gpus=4, speedup=1.9))))
    acts = []
    for i in range(n):
        kind, rel, task = rng.random(), round(rng.uniform(0, 2), 2), rng.choice(["math", "code"])
        if kind < 0.5:
            acts.append(Action(id=f"a{i}", kind="cpu", task=task, release_s=rel, sandbox=f"s{i % 2}",
                               elastic=Elastic(base_s=round(rng.uniform(0.2, 3), 2), parallel_fraction=0.8,
                                               cores=(1, 2, 4), memory_gb=1.0)))
        elif kind < 0.8:
            acts.append(Action(id=f"a{i}", kind="gpu", task=task, release_s=rel, model=rng.choice(["small", "large"]),
                               work_s=round(rng.uniform(0.2, 2), 2)))
        else:
            acts.append(api(f"a{i}", round(rng.uniform(0.1, 1), 2), task=task, release_s=rel))
    return Instance(name=f"mixed{n}-{seed}", nodes=(CpuNode(id="n0", cores=8, memory_gb=16),),
                    sandboxes=(Sandbox(id="s0", node="n0", memory_gb=1), Sandbox(id="s1", node="n0", memory_gb=1)),
                    gpus=gpus, models=models, resident={"g0": ("small",)},
                    quotas=(ApiQuota(id="q", concurrency=2, calls_per_window=3, window_s=1.0),),
                    actions=tuple(acts), objective=objective or Objective())


def test_deterministic_mode_repeats():
    """deterministic=True: the same plan and objective twice."""
    config = SolveConfig(deterministic=True, time_limit_s=0.2)
    c = compile_instance(mixed(15, seed=1), config.tick_s)
    first = CpSatBackend().solve(c, config, None)
    second = CpSatBackend().solve(c, config, None)
    assert first.plan is not None
    assert first.plan.choice == second.plan.choice
    assert first.stats["objective"] == second.stats["objective"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_never_worse_than_greedy(seed):
    """Hinted with the greedy plan, CP-SAT returns a plan at least as good."""
    inst = mixed(14, seed=seed, objective=Objective(weighted_act=1.0, makespan=1.0, model_load=0.2))
    config = SolveConfig(deterministic=True, time_limit_s=0.3)
    c = compile_instance(inst, config.tick_s)
    greedy = GreedyBackend().solve(c, config).plan
    out, s = run(inst, config, hint=True)
    assert s is not None
    assert evaluate(inst, s.values()) <= evaluate(inst, to_schedule(c, greedy)) + 1e-9


def test_window_fixes_the_rest_and_reports_no_bound():
    """window=5: five actions are decided, the rest keep the greedy plan; no bound."""
    inst = mixed(14, seed=4)
    config = SolveConfig(deterministic=True, time_limit_s=0.5, window=5)
    out, s = run(inst, config)
    assert out.status == SolveStatus.FEASIBLE and out.bound is None
    assert out.stats["num_free_actions"] == 5
    c = compile_instance(inst, config.tick_s)
    greedy = GreedyBackend().solve(c, config).plan
    free = set(c.priority_order()[:5])
    fixed = [i for i in range(c.num_actions) if i not in free]
    assert [out_choice for i, out_choice in enumerate(CpSatBackend().solve(c, config, greedy).plan.choice)
            if i in fixed] == [greedy.choice[i] for i in fixed]


def test_automatic_window_rule():
    """Too many options for the budget: the longest urgent prefix that fits."""
    c = compile_instance(mixed(30, seed=5), 0.01)
    total = sum(len(c.options(i)) for i in range(c.num_actions))
    assert window_of(c, SolveConfig(time_limit_s=total / 1000)) == (None, "")  # 1500/s: fits
    keep, note = window_of(c, SolveConfig(time_limit_s=total / 3000))  # half the options
    assert keep is not None and 0 < len(keep) < c.num_actions and "automatic" in note
    assert sum(len(c.options(i)) for i in keep) <= total / 2


def test_priority_order_respects_precedence():
    """A short successor never comes before its long predecessor."""
    inst = Instance(nodes=(CpuNode(id="n", cores=1),),
                    actions=(cpu("long", 5.0), cpu("short", 0.1, after=(Lag(action="long"),)), cpu("mid", 1.0)))
    c = compile_instance(inst, 0.01)
    assert [c.action_ids[i] for i in c.priority_order()] == ["mid", "long", "short"]


def test_front_door():
    """solve(instance, 'cpsat') returns the CP-SAT schedule with a bound <= objective."""
    result = solve(mixed(10, seed=6), "cpsat", SolveConfig(deterministic=True, time_limit_s=0.5))
    assert result.solver == "cpsat" and result.status.has_solution()
    assert result.bound is not None and result.bound <= result.objective + 1e-9
    assert [a.solver for a in result.attempts] == ["greedy", "cpsat"]


def test_integer_scale():
    assert integer_scale([1.0, 2.0]) == 1
    assert integer_scale([0.5, 79.5]) == 10
    assert integer_scale([0.125]) == 1000
    assert integer_scale([1 / 3]) == 10**6
