"""The greedy elastic scheduler's rules, each on a small named situation."""

from __future__ import annotations

from tangram import SolveConfig, solve, violations
from tangram.model.instance import Action, CpuNode, Elastic, Gpu, Instance, Parallelism, RewardModel

CONFIG = SolveConfig(tick_s=0.1, relaxation_bound=False)


def gpus(n: int, memory_gb: float = 80) -> tuple[Gpu, ...]:
    return tuple(Gpu(id=f"g{k}", type="H100", memory_gb=memory_gb, machine="m0") for k in range(n))


def elastic_jobs(n: int) -> tuple[Action, ...]:
    return tuple(Action(id=f"a{k}", kind="cpu", elastic=Elastic(base_s=8, parallel_fraction=0.9, cores=(1, 2, 4, 8)))
                 for k in range(n))


def test_a_lone_elastic_action_gets_the_idle_cores():
    inst = Instance(nodes=(CpuNode(id="n", cores=8),), actions=elastic_jobs(1))
    result = solve(inst, "greedy", CONFIG)
    assert result.schedule[0].placement.cores == 8


def test_a_queue_keeps_every_action_at_its_fewest_cores():
    inst = Instance(nodes=(CpuNode(id="n", cores=8),), actions=elastic_jobs(8))
    result = solve(inst, "greedy", CONFIG)
    assert [a.placement.cores for a in result.schedule] == [1] * 8
    assert violations(inst, result.schedule) == []


def test_a_lone_scoring_grows_into_the_idle_block():
    model = RewardModel(id="rm", memory_gb=30, load_s=5,
                        parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=4, speedup=3.5)))
    inst = Instance(gpus=gpus(4), models=(model,), resident={f"g{k}": ("rm",) for k in range(4)},
                    actions=(Action(id="s", kind="gpu", model="rm", work_s=7),))
    result = solve(inst, "greedy", CONFIG)
    assert len(result.schedule[0].placement.gpus) == 4 and result.schedule[0].end_s == 2.0


def test_larger_degrees_do_not_claim_gpus_other_models_need():
    """A fast 4-GPU model would take every GPU for itself and lock the other model
    out for the whole plan; with the fewest-GPU rule both models share the fleet."""
    big = RewardModel(id="big", memory_gb=70, load_s=0.1,
                      parallelism=(Parallelism(gpus=2, speedup=1.8), Parallelism(gpus=4, speedup=3.4)))
    small = RewardModel(id="small", memory_gb=20, load_s=0.1)
    actions = tuple(Action(id=f"b{k}", kind="gpu", model="big", work_s=2) for k in range(2)) + tuple(
        Action(id=f"s{k}", kind="gpu", model="small", work_s=4) for k in range(4))
    inst = Instance(gpus=gpus(4), models=(big, small), actions=actions)
    result = solve(inst, "greedy", CONFIG)
    assert violations(inst, result.schedule) == []
    on = {a.action: a.placement.gpus for a in result.schedule}
    assert set(on["s0"]) | set(on["s1"]) | set(on["s2"]) | set(on["s3"])  # small runs somewhere
    assert max(a.end_s for a in result.schedule if a.action.startswith("s")) < 12.0
