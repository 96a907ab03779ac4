"""Solve one instance with every backend and compare them side by side.

    python analysis/compare_solvers.py INSTANCE.json [--time-limit S] [--tick S] [--plots DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tangram import SolveConfig, solve, violations  # noqa: E402
from tangram.analysis.schedule import plot_gantt  # noqa: E402
from tangram.analysis.tables import format_table  # noqa: E402
from tangram.io import read_instance  # noqa: E402
from tangram.solver import BACKENDS  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("instance", type=Path)
    p.add_argument("--time-limit", type=float, default=5.0)
    p.add_argument("--tick", type=float, default=0.1)
    p.add_argument("--plots", type=Path, help="one Gantt chart per backend goes here")
    args = p.parse_args()
    instance = read_instance(args.instance)
    config = SolveConfig(time_limit_s=args.time_limit, tick_s=args.tick, deterministic=True, fallback=())
    rows, results = [], {}
    for name in BACKENDS:
        r = results[name] = solve(instance, solver=name, config=config)
        feasible = not violations(instance, r.schedule) if r.status.has_solution() else None
        rows.append([name, r.status.value, r.objective, r.bound, None if r.gap is None else 100 * r.gap,
                     r.metrics.mean_act_s if r.metrics else None, r.metrics.makespan_s if r.metrics else None,
                     {True: "yes", False: "NO", None: "-"}[feasible], r.runtime_s])
    print(format_table(["backend", "status", "objective", "bound", "gap_%", "mean_act_s", "makespan_s", "checked",
                        "time_s"], rows))
    for name, r in results.items():
        if not r.status.has_solution():
            print(f"{name}: {r.attempts[-1].message}")
    if args.plots:
        args.plots.mkdir(parents=True, exist_ok=True)
        for name, r in results.items():
            if r.status.has_solution():
                ax = plot_gantt(r)
                ax.figure.tight_layout()
                ax.figure.savefig(args.plots / f"{instance.name}-{name}.png", dpi=110)
                plt.close(ax.figure)
        print(f"Gantt charts in {args.plots}/")


if __name__ == "__main__":
    main()
