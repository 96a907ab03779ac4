"""The ``tangram`` command line: solve, check, inspect, import, schema and benchmarks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tangram.io.files import InputError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tangram", description=__doc__)
    sub = p.add_subparsers(title="commands")

    s = sub.add_parser("solve", help="solve an instance file")
    s.add_argument("instance", type=Path)
    _solver_args(s)
    s.add_argument("--output", "-o", type=Path, help="write the result JSON here")
    s.add_argument("--plot", type=Path, help="write a Gantt chart PNG here")
    s.set_defaults(run=_solve)

    c = sub.add_parser("check", help="check a result's schedule against its instance")
    c.add_argument("instance", type=Path)
    c.add_argument("result", type=Path)
    c.set_defaults(run=_check)

    i = sub.add_parser("inspect", help="summary, utilisation and Gantt chart of a result")
    i.add_argument("result", type=Path)
    i.add_argument("--instance", type=Path, help="the instance, for utilisation against capacity")
    i.add_argument("--plot", type=Path, help="write a Gantt chart PNG here")
    i.set_defaults(run=_inspect)

    e = sub.add_parser("examples", help="solve every example instance and print a table")
    e.add_argument("--dir", type=Path, default=Path("instances/examples"))
    _solver_args(e, default_limit=2.0)
    e.add_argument("--out", type=Path, default=Path("out/examples"), help="results and Gantt charts go here")
    e.set_defaults(run=_examples)

    imp = sub.add_parser("import", help="convert a foreign format into an instance")
    isub = imp.add_subparsers(title="formats")
    ps = isub.add_parser("psplib", help="PSPLIB single-mode RCPSP (.sm)")
    ps.add_argument("file", type=Path)
    ps.add_argument("--output", "-o", type=Path, required=True)
    ps.set_defaults(run=_import_psplib)

    sc = sub.add_parser("schema", help="print the JSON Schema of instance files")
    sc.set_defaults(run=lambda a: print(__import__("tangram.io.files", fromlist=["x"]).instance_schema()))

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(title="benchmarks")
    bs = bsub.add_parser("solver", help="one realistic scheduling epoch")
    bs.add_argument("--actions", type=int, default=200)
    bs.add_argument("--nodes", type=int, default=50)
    bs.add_argument("--gpus", type=int, default=32)
    bs.add_argument("--solver", default="greedy")
    bs.add_argument("--time-limit", type=float, default=1.0)
    bs.add_argument("--window", type=int, default=None)
    bs.add_argument("--seed", type=int, default=0)
    bs.add_argument("--repeat", type=int, default=3)
    bs.set_defaults(run=_bench_solver)
    return p


def _solver_args(p: argparse.ArgumentParser, default_limit: float = 10.0) -> None:
    p.add_argument("--solver", default="cpsat", help="cpsat, milp or greedy (default: cpsat)")
    p.add_argument("--time-limit", type=float, default=default_limit, help="seconds per backend")
    p.add_argument("--tick", type=float, default=None, help="solver time unit, seconds")
    p.add_argument("--config", type=Path, help="a SolveConfig TOML preset")
    p.add_argument("--deterministic", action="store_true", help="reproducible single-worker search")
    p.add_argument("--window", type=int, default=None, help="exact model over the N most urgent actions")


def _config(args):
    from pydantic import ValidationError

    from tangram.io.files import describe
    from tangram.solver.config import SolveConfig

    overrides = {"time_limit_s": args.time_limit, "deterministic": args.deterministic}
    if args.tick is not None:
        overrides["tick_s"] = args.tick
    if args.window is not None:
        overrides["window"] = args.window
    try:
        if args.config:
            return SolveConfig.from_file(args.config, **overrides)
        return SolveConfig(**overrides)
    except ValidationError as exc:
        raise InputError(f"{args.config or 'options'}: {describe(exc)}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{args.config}: {exc}") from None


def _solve(args) -> int:
    from tangram.analysis.schedule import summary_rows
    from tangram.analysis.tables import format_table
    from tangram.io.files import read_instance, write_model
    from tangram.solver import backend, solve

    instance = read_instance(args.instance)
    try:
        backend(args.solver)
    except ValueError as exc:
        raise InputError(f"--solver: {exc}") from None
    result = solve(instance, solver=args.solver, config=_config(args))
    print(format_table(["field", "value"], summary_rows(result)))
    if args.output:
        write_model(result, args.output)
    if args.plot:
        _save_gantt(result, args.plot)
    return 0 if result.status.has_solution() else 1


def _check(args) -> int:
    from tangram.io.files import read_instance, read_result
    from tangram.model.check import evaluate, violations

    instance, result = read_instance(args.instance), read_result(args.result)
    problems = violations(instance, result.schedule)
    for p in problems:
        print(f"violation: {p}")
    if problems:
        print(f"{len(problems)} violation(s)")
        return 1
    print(f"feasible: {len(result.schedule)} actions, objective {evaluate(instance, result.schedule):.6g}")
    return 0


def _inspect(args) -> int:
    from tangram.analysis.schedule import summary_rows, utilisation
    from tangram.analysis.tables import format_table
    from tangram.io.files import read_instance, read_result

    result = read_result(args.result)
    instance = read_instance(args.instance) if args.instance else None
    print(format_table(["field", "value"], summary_rows(result)))
    print()
    rows = utilisation(result, instance)
    print(format_table(["resource", "busy_unit_s", "capacity", "utilisation"],
                       [[r["resource"], r["busy_unit_s"], r["capacity"], r["utilisation"]] for r in rows]))
    if args.plot:
        _save_gantt(result, args.plot)
    return 0


def _examples(args) -> int:
    from tangram.analysis.tables import format_table
    from tangram.io.files import read_instance, write_model
    from tangram.model.check import violations
    from tangram.solver import solve

    files = sorted(args.dir.glob("*.json"))
    if not files:
        raise InputError(f"{args.dir}: no instance files (*.json)")
    config = _config(args)
    rows = []
    for f in files:
        instance = read_instance(f)
        result = solve(instance, solver=args.solver, config=config)
        ok = not violations(instance, result.schedule) if result.status.has_solution() else False
        write_model(result, args.out / f"{f.stem}.result.json")
        if result.status.has_solution():
            _save_gantt(result, args.out / f"{f.stem}.gantt.png")
        m = result.metrics
        gap = result.gap
        rows.append([f.stem, len(instance.actions), result.status.value, result.solver, result.objective,
                     result.bound, None if gap is None else round(100 * gap, 2), m.mean_act_s if m else None,
                     m.makespan_s if m else None, "yes" if ok else "NO", round(result.runtime_s, 3)])
    print(format_table(["instance", "actions", "status", "solver", "objective", "bound", "gap_%", "mean_act_s",
                        "makespan_s", "checked", "time_s"], rows))
    print(f"\nresults and Gantt charts in {args.out}/")
    return 0


def _import_psplib(args) -> int:
    from tangram.io.files import write_model
    from tangram.io.psplib import read_psplib

    try:
        instance = read_psplib(args.file)
    except OSError as exc:
        raise InputError(f"{args.file}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(str(exc)) from None
    write_model(instance, args.output)
    print(f"{args.file} -> {args.output}: {len(instance.actions)} jobs, {len(instance.renewables)} resources")
    return 0


def _bench_solver(args) -> int:
    from tangram.bench import bench_solver

    print(json.dumps(bench_solver(actions=args.actions, nodes=args.nodes, gpus=args.gpus, solver=args.solver,
                                  time_limit_s=args.time_limit, window=args.window, seed=args.seed,
                                  repeat=args.repeat), indent=2))
    return 0


def _save_gantt(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tangram.analysis.schedule import plot_gantt

    path.parent.mkdir(parents=True, exist_ok=True)
    ax = plot_gantt(result)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=120)
    plt.close(ax.figure)


if __name__ == "__main__":
    sys.exit(main())
