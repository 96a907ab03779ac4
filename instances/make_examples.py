"""Build the example and regression instances (deterministic; rerun to regenerate).

    python instances/make_examples.py            # write examples/*.json and regression/*.json
    python instances/make_examples.py --record   # also solve regression/*.json with CP-SAT in
                                                 # deterministic mode and record objective and bound

The examples are small and each shows a part of the model; together they use every
feature: elastic CPU actions in sandboxes (affinity, memory), reward models on GPUs of two
types in two NVLink domains with 1/2/4-GPU modes, resident models and load times, API
quotas with concurrency and rate, running actions, precedence with lags, deadlines, every
objective term, and a constraint family switched off. Regression instances are larger and
carry the best objective and proven bound CP-SAT found, for bound-consistency tests.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from tangram.io.files import read_instance, write_model
from tangram.io.psplib import read_psplib
from tangram.model.instance import (
    Action,
    ApiQuota,
    Constraints,
    CpuNode,
    Elastic,
    Gpu,
    Instance,
    Lag,
    Link,
    Mode,
    Objective,
    Parallelism,
    RewardModel,
    Running,
    Sandbox,
)

HERE = Path(__file__).resolve().parent
RECORD_COMMAND = "python instances/make_examples.py --record"
RECORD_CONFIG = dict(time_limit_s=20.0, tick_s=0.1, deterministic=True, num_workers=1, seed=0)

# --------------------------------------------------------------------------- building blocks


def cpu_nodes(count: int, cores: int = 16, memory_gb: float = 64.0) -> tuple[CpuNode, ...]:
    return tuple(CpuNode(id=f"cpu{k}", cores=cores, memory_gb=memory_gb) for k in range(count))


def gpu_fleet() -> tuple[Gpu, ...]:
    """Two machines: four H100 in NVLink domain nv-a, four A100 (slower) in domain nv-b."""
    h100 = [Gpu(id=f"h100-{k}", type="H100", memory_gb=80, machine="gpu-a", nvlink_domain="nv-a")
            for k in range(4)]
    a100 = [Gpu(id=f"a100-{k}", type="A100", memory_gb=80, machine="gpu-b", nvlink_domain="nv-b", speed=0.6)
            for k in range(4)]
    return (*h100, *a100)


def reward_models() -> tuple[RewardModel, ...]:
    return (
        RewardModel(id="rm-7b", memory_gb=16, load_s=8.0,
                    parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.8))),
        RewardModel(id="judge-32b", memory_gb=40, load_s=20.0, gpu_types=("A100",),
                    parallelism=(Parallelism(gpus=2, speedup=1.0), Parallelism(gpus=4, speedup=1.7))),
        RewardModel(id="prm-70b", memory_gb=60, load_s=45.0, gpu_types=("H100",),
                    parallelism=(Parallelism(gpus=4, speedup=1.0),)),
    )


def fabric(nodes: tuple[CpuNode, ...]) -> tuple[Link, ...]:
    """Every CPU machine and both GPU machines on one 100 Gbit/s switch."""
    ends = [n.machine_id for n in nodes] + ["gpu-a", "gpu-b"]
    return tuple(Link(a=e, b="tor", type="ethernet", bandwidth_gbps=100, latency_s=0.0005) for e in ends)


def code_run(aid: str, sandbox: str, base_s: float, p: float, **kw) -> Action:
    """A sandboxed code execution with an Amdahl speedup over 1, 2, 4 or 8 cores."""
    return Action(id=aid, kind="cpu", sandbox=sandbox,
                  elastic=Elastic(base_s=base_s, parallel_fraction=p, memory_gb=kw.pop("memory_gb", 2.0)), **kw)


# --------------------------------------------------------------------------- examples


def coding_step() -> Instance:
    rng = random.Random(1)
    nodes = cpu_nodes(2, cores=16, memory_gb=64)
    sandboxes = tuple(Sandbox(id=f"sb{k}", node=nodes[k % 2].id, memory_gb=8) for k in range(6))
    actions = [code_run(f"test{k}", f"sb{k % 6}", base_s=round(rng.uniform(4, 30), 1),
                        p=round(rng.uniform(0.3, 0.95), 2), release_s=round(rng.uniform(0, 6), 1),
                        task="mbpp" if k % 3 else "swe", weight=2.0 if k % 3 == 0 else 1.0,
                        memory_gb=rng.choice([1.0, 2.0, 4.0]))
               for k in range(12)]
    # An explicit mode list instead of a speedup model: a build that needs 4 cores or runs slowly on 1.
    actions.append(Action(id="build", kind="cpu", sandbox="sb0", task="swe", deadline_s=40.0,
                          modes=(Mode(duration_s=24, cores=1, memory_gb=6), Mode(duration_s=7, cores=4, memory_gb=6))))
    return Instance(
        name="coding_step", nodes=nodes, sandboxes=sandboxes, actions=tuple(actions),
        running=(Running(action="old-test", task="mbpp", end_s=5.0, node="cpu0", cores=8, memory_gb=4),),
        objective=Objective(weighted_act=1.0, resource_seconds=0.05),
        metadata={"description": "One RL step's code executions: 13 sandboxed CPU actions of two tasks, elastic "
                                 "(Amdahl, 1-8 cores) or with explicit modes, pinned to their sandbox's node, "
                                 "memory-limited; one test still running; a deadline on the build. "
                                 "Objective: weighted ACT plus a small resource-seconds cost."},
    )


def reward_scoring() -> Instance:
    rng = random.Random(2)
    nodes = cpu_nodes(2)
    sandboxes = tuple(Sandbox(id=f"sb{k}", node=nodes[k % 2].id, memory_gb=4) for k in range(4))
    model_of = ["rm-7b"] * 6 + ["judge-32b"] * 4 + ["prm-70b"] * 2
    actions = tuple(Action(id=f"score{k}", kind="gpu", model=m, work_s=round(rng.uniform(3, 12), 1),
                           release_s=round(rng.uniform(0, 4), 1), task="math" if k % 2 else "code",
                           sandbox=f"sb{k % 4}", input_mb=rng.choice([5.0, 50.0, 400.0]))
                    for k, m in enumerate(model_of))
    return Instance(
        name="reward_models", nodes=nodes, gpus=gpu_fleet(), models=reward_models(), links=fabric(nodes),
        resident={"h100-0": ("rm-7b",), "h100-1": ("rm-7b",), "a100-0": ("rm-7b",), "a100-2": ("judge-32b",),
                  "a100-3": ("judge-32b",)},
        sandboxes=sandboxes, actions=actions,
        running=(Running(action="score-old", task="code", end_s=3.0, gpus=("h100-1",), model="rm-7b"),),
        objective=Objective(weighted_act=1.0, model_load=1.0),
        metadata={"description": "Reward-model scoring on 4 H100 (NVLink domain nv-a) and 4 slower A100 (nv-b): "
                                 "a 7B model on 1 or 2 GPUs of either type, a 32B judge on 2 or 4 A100, a 70B PRM on "
                                 "4 H100; "
                                 "some models already resident, others pay their load time; inputs move from "
                                 "the sandboxes over a 100 Gbit/s fabric; one scoring still running. "
                                 "Objective: weighted ACT plus model-load seconds."},
    )


def search_quota() -> Instance:
    rng = random.Random(3)
    actions = []
    for k in range(16):
        task = ("browse", "qa", "deep-research")[k % 3]
        actions.append(Action(id=f"search{k}", kind="api", quota="web-search", task=task,
                              release_s=round(rng.uniform(0, 3), 2),
                              modes=(Mode(duration_s=round(rng.uniform(0.4, 2.5), 2)),)))
    # A call whose modes name different services: the scheduler picks the one free first.
    actions.append(Action(id="judge0", kind="api", task="qa", deadline_s=8.0,
                          modes=(Mode(duration_s=3.0, quota="hosted-judge"), Mode(duration_s=5.0, quota="backup-judge"))))
    return Instance(
        name="search_quota",
        quotas=(ApiQuota(id="web-search", concurrency=4, calls_per_window=5, window_s=1.0),
                ApiQuota(id="hosted-judge", concurrency=1), ApiQuota(id="backup-judge", concurrency=2)),
        actions=tuple(actions),
        running=(Running(action="search-old", task="browse", end_s=1.5, quota="web-search"),
                 Running(action="judge-old", task="qa", end_s=4.0, quota="hosted-judge")),
        objective=Objective(weighted_act=1.0, fairness=5.0),
        metadata={"description": "Quota-limited API calls of three tasks: a web search with 4 calls in flight and "
                                 "5 call starts per second, a hosted judge with one slot and a backup judge; "
                                 "two calls still running; one deadline. Objective: weighted ACT plus the "
                                 "largest per-task slowdown (fairness)."},
    )


def trajectory_chain() -> Instance:
    """Three agent trajectories: code -> (LLM thinks) -> search -> (LLM thinks) -> code -> reward."""
    nodes = cpu_nodes(1, cores=8, memory_gb=32)
    actions = []
    for t in range(3):
        sb, p = f"traj{t}", f"t{t}."
        think = 2.0 + t  # LLM generation between two tool calls, seconds
        actions += [
            code_run(p + "run", sb, base_s=6.0 + 2 * t, p=0.8, trajectory=sb, task="swe", release_s=0.5 * t),
            Action(id=p + "search", kind="api", quota="web-search", trajectory=sb, task="swe",
                   modes=(Mode(duration_s=1.2),), after=(Lag(action=p + "run", lag_s=think),)),
            code_run(p + "fix", sb, base_s=10.0, p=0.9, trajectory=sb, task="swe",
                     after=(Lag(action=p + "search", lag_s=think),)),
            Action(id=p + "reward", kind="gpu", model="rm-7b", work_s=4.0, trajectory=sb, task="swe", sandbox=sb,
                   input_mb=20.0, deadline_s=90.0, after=(Lag(action=p + "fix", lag_s=0.5),)),
        ]
    gpus = gpu_fleet()[:2]
    return Instance(
        name="trajectory_chain", nodes=nodes, gpus=gpus, models=reward_models()[:1], links=fabric(nodes),
        quotas=(ApiQuota(id="web-search", concurrency=2, calls_per_window=2, window_s=1.0),),
        sandboxes=tuple(Sandbox(id=f"traj{t}", node="cpu0", memory_gb=4) for t in range(3)),
        actions=tuple(actions),
        objective=Objective(weighted_act=1.0, makespan=3.0),
        metadata={"description": "Three agent trajectories as precedence chains with lags for the LLM's thinking "
                                 "time: code run -> web search -> code fix -> reward scoring, sharing 8 cores, "
                                 "2 GPUs and a search quota; the reward must land before 90 s. "
                                 "Objective: weighted ACT plus 3x the makespan (RL step time)."},
    )


def mixed_epoch() -> Instance:
    """One controller epoch with a bit of everything, mid-flight (now_s = 100)."""
    now = 100.0
    rng = random.Random(5)
    nodes = cpu_nodes(3, cores=16, memory_gb=48)
    sandboxes = tuple(Sandbox(id=f"sb{k}", node=nodes[k % 3].id, memory_gb=6) for k in range(6))
    actions = [code_run(f"exec{k}", f"sb{k}", base_s=round(rng.uniform(3, 20), 1), p=round(rng.uniform(0.5, 0.9), 2),
                        release_s=now + round(rng.uniform(0, 5), 1), task=("code", "math")[k % 2],
                        trajectory=f"sb{k}")
               for k in range(6)]
    actions += [Action(id=f"score{k}", kind="gpu", model=m, work_s=w, release_s=now + k, task="math",
                       deadline_s=now + 60 if k == 0 else None)
                for k, (m, w) in enumerate([("rm-7b", 5.0), ("rm-7b", 3.0), ("judge-32b", 9.0), ("prm-70b", 12.0)])]
    actions += [Action(id=f"call{k}", kind="api", quota="web-search", release_s=now + 0.5 * k, task="code",
                       modes=(Mode(duration_s=1.5),)) for k in range(5)]
    actions.append(Action(id="exec0.next", kind="cpu", sandbox="sb0", trajectory="sb0", task="code",
                          elastic=Elastic(base_s=8.0, parallel_fraction=0.7, memory_gb=2.0),
                          after=(Lag(action="exec-running", lag_s=3.0),)))
    return Instance(
        name="mixed_epoch", now_s=now, nodes=nodes, gpus=gpu_fleet(), models=reward_models(), links=fabric(nodes),
        quotas=(ApiQuota(id="web-search", concurrency=3, calls_per_window=4, window_s=2.0),),
        resident={"h100-0": ("rm-7b",), "a100-0": ("judge-32b",), "a100-1": ("judge-32b",)},
        sandboxes=sandboxes, actions=tuple(actions),
        running=(Running(action="exec-running", task="code", end_s=now + 4, node="cpu0", cores=4, memory_gb=2),
                 Running(action="score-running", task="math", end_s=now + 6, gpus=("a100-0", "a100-1"),
                         model="judge-32b"),
                 Running(action="call-running", task="code", end_s=now + 1, quota="web-search")),
        objective=Objective(weighted_act=1.0, makespan=1.0, model_load=0.5, resource_seconds=0.01, fairness=2.0),
        metadata={"description": "A mid-run scheduling epoch (now = 100 s): CPU, GPU and API actions of two tasks "
                                 "with running actions on each pool, resident and non-resident models, a follow-up "
                                 "action waiting on a running one plus a think lag, and a deadline. The objective "
                                 "uses all five terms."},
    )


def no_residency() -> Instance:
    """The reward fleet with model residency switched off, minimising the makespan."""
    return reward_scoring().model_copy(update=dict(
        name="no_residency", constraints=Constraints(model_residency=False),
        objective=Objective(weighted_act=0.0, makespan=1.0),
        metadata={"description": "What-if of reward_models with the model_residency constraint family off: GPU "
                                 "memory no longer limits which models share a GPU and no load time is paid. "
                                 "Objective: the makespan alone."},
    ))


EXAMPLES = {"coding_step": coding_step, "reward_models": reward_scoring, "search_quota": search_quota,
            "trajectory_chain": trajectory_chain, "mixed_epoch": mixed_epoch, "no_residency": no_residency}

# --------------------------------------------------------------------------- regression instances


def coding_burst() -> Instance:
    rng = random.Random(11)
    nodes = cpu_nodes(3, cores=16, memory_gb=64)
    sandboxes = tuple(Sandbox(id=f"sb{k}", node=nodes[k % 3].id, memory_gb=4) for k in range(12))
    actions = tuple(code_run(f"run{k}", f"sb{k % 12}", base_s=round(rng.uniform(2, 40), 1),
                             p=round(rng.uniform(0.2, 0.95), 2), release_s=round(rng.uniform(0, 20), 1),
                             task=("mbpp", "swe", "tb")[k % 3], weight=rng.choice([1.0, 1.0, 2.0]))
                    for k in range(30))
    return Instance(name="coding_burst", nodes=nodes, sandboxes=sandboxes, actions=actions,
                    metadata={"description": "30 elastic sandboxed code executions of three tasks on 3 nodes of "
                                             "16 cores, arriving over 20 s. Objective: weighted ACT."})


def reward_fleet() -> Instance:
    rng = random.Random(12)
    model_of = ["rm-7b"] * 10 + ["judge-32b"] * 6 + ["prm-70b"] * 4
    actions = tuple(Action(id=f"score{k}", kind="gpu", model=m, work_s=round(rng.uniform(2, 15), 1),
                           release_s=round(rng.uniform(0, 10), 1), task=("math", "code")[k % 2])
                    for k, m in enumerate(model_of))
    return Instance(name="reward_fleet", gpus=gpu_fleet(), models=reward_models(),
                    resident={"h100-0": ("rm-7b",), "a100-0": ("judge-32b",), "a100-1": ("judge-32b",)},
                    actions=actions, objective=Objective(weighted_act=1.0, model_load=1.0),
                    metadata={"description": "20 scorings with three reward models on 8 GPUs of two types. "
                                             "Objective: weighted ACT plus model-load seconds."})


def regression_psplib() -> Instance:
    inst = read_psplib(HERE / "psplib" / "j301_1.sm")
    return inst.model_copy(update=dict(
        name="psplib_j301_1",
        metadata={**inst.metadata, "description": "PSPLIB j301_1 (30 jobs, 4 renewable resources), "
                                                  "makespan; known optimum 43."}))


REGRESSION = {"coding_burst": coding_burst, "reward_fleet": reward_fleet, "psplib_j301_1": regression_psplib,
              "mixed_epoch": mixed_epoch}

# --------------------------------------------------------------------------- main


def record(path: Path) -> None:
    """Solve a regression instance with CP-SAT (deterministic) and store objective and bound."""
    from tangram.solver import SolveConfig, solve

    inst = read_instance(path)
    result = solve(inst, solver="cpsat", config=SolveConfig(**RECORD_CONFIG))
    if result.solver != "cpsat" or result.bound is None:
        raise SystemExit(f"{path.name}: CP-SAT gave no objective and bound ({result.status.value}, {result.solver})")
    meta = {k: v for k, v in inst.metadata.items() if not k.startswith("cpsat_")}
    meta.update(best_objective=round(result.objective, 6), proven_bound=round(result.bound, 6),
                cpsat_status=result.status.value, cpsat_command=RECORD_COMMAND,
                cpsat_config=", ".join(f"{k}={v}" for k, v in RECORD_CONFIG.items()))
    write_model(inst.model_copy(update={"metadata": meta}), path)
    print(f"{path.name}: {result.status.value} objective {result.objective:g} bound {result.bound:g}")


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--record", action="store_true", help="solve regression instances and record the results")
    ns = args.parse_args(argv)
    for folder, builders in (("examples", EXAMPLES), ("regression", REGRESSION)):
        for name, build in builders.items():
            path = HERE / folder / f"{name}.json"
            inst = build()
            if folder == "regression" and path.exists() and not ns.record:
                # Keep recorded results when the instance itself is unchanged.
                old = read_instance(path)
                if old.model_copy(update={"metadata": inst.metadata}) == inst:
                    continue
            write_model(inst, path)
            print(f"wrote {path.relative_to(HERE.parent)}")
    if ns.record:
        for name in REGRESSION:
            record(HERE / "regression" / f"{name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
