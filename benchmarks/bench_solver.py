"""Solver benchmark: greedy scaling and CP-SAT quality on realistic epochs.

    python benchmarks/bench_solver.py [--quick] [--output benchmarks/results/solver.json]

Prints two fixed-width tables and writes the raw rows as JSON. Figures are
compared as ratios within one run: the machine may be shared and noisy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm import tqdm

from tangram.analysis.tables import format_table
from tangram.bench import bench_solver

GREEDY = [(1_000, 100, 64), (2_500, 250, 128), (5_000, 500, 256), (10_000, 1_000, 256)]
CPSAT = [(50, 10, 16, None), (200, 40, 32, None), (1_000, 100, 64, None), (1_000, 100, 64, 200)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller sizes, one repetition")
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/solver.json"))
    args = p.parse_args()
    greedy_sizes = GREEDY[:2] if args.quick else GREEDY
    cpsat_sizes = CPSAT[:2] if args.quick else CPSAT
    repeat = 2 if args.quick else 4
    rows = []
    jobs = [("greedy", a, n, g, None) for a, n, g in greedy_sizes] + [("cpsat", *s) for s in cpsat_sizes]
    for solver, a, n, g, w in tqdm(jobs, desc="epochs", unit="epoch"):
        rows.append(bench_solver(actions=a, nodes=n, gpus=g, solver=solver, time_limit_s=1.0, window=w,
                                 repeat=repeat if solver == "greedy" else 1))
    greedy = [r for r in rows if r["solver"] == "greedy"]
    print("\nGreedy epoch time (compile + solve + map back); warm: median of the repetitions after the first")
    print(format_table(["actions", "nodes", "gpus", "cold_ms", "warm_ms", "backend_ms", "us/action(warm)", "gap_%"],
                       [[r["actions"], r["nodes"], r["gpus"], 1e3 * r["epoch_cold_s"], 1e3 * r["epoch_s"],
                         1e3 * r["backend_s"], 1e6 * r["epoch_s"] / r["actions"],
                         None if r["gap"] is None else 100 * r["gap"]] for r in greedy]))
    cpsat = [r for r in rows if r["solver"] == "cpsat"]
    print("\nCP-SAT with a 1 s budget, warm-started from greedy")
    print(format_table(["actions", "nodes", "gpus", "window", "status", "epoch_s", "objective", "bound", "gap_%",
                        "vs_greedy"],
                       [[r["actions"], r["nodes"], r["gpus"], r["window"], r["status"], r["epoch_s"], r["objective"],
                         r["bound"], None if r["gap"] is None else 100 * r["gap"], r["vs_greedy"]] for r in cpsat]))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\nrows written to {args.output}")


if __name__ == "__main__":
    main()
