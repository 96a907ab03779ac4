"""Simulator throughput: simulated actions per wall-clock minute.

    python benchmarks/sim_speed.py --trajectories 1000 --steps 10 --policy greedy
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from tangram.model.instance import ApiQuota, CpuNode, Gpu, Parallelism, RewardModel
from tangram.runtime.controller import ControllerConfig, Fleet
from tangram.runtime.sim import SharedFifoPolicy, simulate, tangram_policy
from tangram.runtime.sim.workload import synthetic


def fleet(nodes: int = 16, cores: int = 32, gpus: int = 8) -> Fleet:
    """``nodes`` CPU nodes, one machine of ``gpus`` H100s hosting one reward model, one web-search quota."""
    return Fleet(
        nodes=tuple(CpuNode(id=f"n{i}", cores=cores, memory_gb=256) for i in range(nodes)),
        gpus=tuple(Gpu(id=f"g{i}", type="H100", memory_gb=80, machine="gpu0") for i in range(gpus)),
        models=(RewardModel(id="rm", memory_gb=30, load_s=5.0,
                            parallelism=(Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.8))),),
        quotas=(ApiQuota(id="web", concurrency=64, calls_per_window=200, window_s=1.0),),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--arrival-s", type=float, default=20.0, help="Trajectories start over this many seconds.")
    ap.add_argument("--policy", choices=["greedy", "fifo"], default="greedy")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--interval", type=float, default=0.02, help="Least time between epochs, s.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    w = synthetic(args.trajectories, steps=args.steps, seed=args.seed, arrival_s=args.arrival_s,
                  model="rm", quota="web")
    policy = (tangram_policy(ControllerConfig(window=args.window, min_epoch_interval_s=args.interval))
              if args.policy == "greedy" else SharedFifoPolicy.factory(cores=2))
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    r = simulate(w, fleet(), policy)
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    s = r.summary()
    print(f"policy={args.policy} actions={w.num_actions} epochs={r.epochs} virtual_s={r.end_s:.1f} "
          f"wall_s={r.wall_s:.2f} solve_s={r.solve_s:.2f}")
    print(f"mean_act_s={s['mean_act_s']:.3f} p50_act_s={s['p50_act_s']:.3f} p99_act_s={s['p99_act_s']:.3f} "
          f"makespan_s={s['makespan_s']:.1f}")
    print(f"actions_per_min={w.num_actions / r.wall_s * 60:,.0f}")


if __name__ == "__main__":
    main()
