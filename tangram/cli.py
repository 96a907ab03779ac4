"""The ``tangram`` command line: solve and inspect instances, simulate and compare policies, run the service."""

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
    sc.set_defaults(run=_schema)

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
    _service_commands(sub)
    _experiment_commands(sub)
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


def _schema(args) -> int:
    from tangram.io.files import instance_schema

    print(instance_schema())
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


# --------------------------------------------------------------------------- the service: serve, submit, status, demo


def _service_commands(sub) -> None:
    sv = sub.add_parser("serve", help="run the scheduling service (HTTP API on embedded or joined Ray)")
    sv.add_argument("--config", type=Path, help="service TOML (fleet, plug-ins, [controller]); a default fleet if absent")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8470)
    sv.add_argument("--token-file", type=Path, help="bearer tokens, one a line; a new one is written here if absent")
    sv.add_argument("--ray-address", help="join this Ray cluster and discover its nodes and GPUs")
    sv.add_argument("--journal", type=Path, default=Path("tangram-journal.jsonl"),
                    help="append-only journal; an existing one is resumed")
    sv.set_defaults(run=_serve)

    for name, fn, help_ in (("submit", _submit, "submit one action to a service and print its result"),
                            ("status", _status, "queue lengths, pools and recent ACT of a service")):
        c = sub.add_parser(name, help=help_)
        c.add_argument("--url", default="http://127.0.0.1:8470")
        c.add_argument("--token-file", type=Path, required=True)
        if name == "submit":
            what = c.add_mutually_exclusive_group(required=True)
            what.add_argument("--code", help="Python source to run in a sandbox")
            what.add_argument("--argv", nargs="+", help="a command to run in a sandbox")
            c.add_argument("--cores", type=int, default=1)
            c.add_argument("--duration", type=float, default=1.0, help="duration hint, seconds")
            c.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the result")
        c.set_defaults(run=fn)

    d = sub.add_parser("demo", help="drive MBPP and HumanEval through the live service, Tangram vs trajectory-bound")
    d.add_argument("--mbpp", type=int, default=60, help="MBPP problems")
    d.add_argument("--humaneval", type=int, default=20, help="HumanEval problems")
    d.add_argument("--solver", default="greedy", help="the controller's backend (greedy, cpsat)")
    d.add_argument("--policies", default="tangram,trajectory-bound", help="comma-separated policies to run")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", type=Path, default=Path("out/demo"), help="report directory")
    d.set_defaults(run=_demo)


def _serve(args) -> int:
    from tangram.service.config import ServiceConfig, default_config
    from tangram.service.server import Service, new_token, read_tokens, serve

    config = ServiceConfig.from_file(args.config) if args.config else default_config()
    if args.token_file and args.token_file.exists():
        tokens = read_tokens(args.token_file)
    else:
        tokens = [new_token()]
        if args.token_file:
            args.token_file.parent.mkdir(parents=True, exist_ok=True)
            args.token_file.write_text(tokens[0] + "\n")
            args.token_file.chmod(0o600)
            print(f"token written to {args.token_file}", file=sys.stderr)
        else:
            print(f"token: {tokens[0]}", file=sys.stderr)
    service = Service(config, journal=args.journal, ray_address=args.ray_address)
    print(f"tangram: {config.policy} on {len(service.fleet.nodes)} nodes, {len(service.fleet.gpus)} GPUs; "
          f"resumed {service.runner.resumed} actions; http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    serve(service, tokens, args.host, args.port)
    return 0


def _client(args):
    from tangram.client import Client
    from tangram.service.server import read_tokens

    return Client(args.url, read_tokens(args.token_file)[0])


def _submit(args) -> int:
    import uuid

    from tangram.client import TangramError

    payload = {"code": args.code} if args.code is not None else {"argv": args.argv}
    action = {"id": f"cli-{uuid.uuid4().hex[:12]}", "kind": "cpu",
              "modes": [{"duration_s": args.duration, "cores": args.cores}]}
    try:
        with _client(args) as c:
            c.submit(action, payload)
            rec = c.wait(action["id"], timeout_s=args.timeout)
    except (TangramError, TimeoutError) as e:
        raise InputError(str(e)) from None
    r = rec.get("result") or {}
    sys.stdout.write(r.get("stdout", ""))
    sys.stderr.write(r.get("stderr", ""))
    print(f"[{rec['id']}: {rec['state']} on {rec['node']} ({rec['cores']} cores), ACT {rec['act_s']:.3f} s]",
          file=sys.stderr)
    return 0 if rec["state"] == "ok" else 1


def _status(args) -> int:
    from tangram.analysis.tables import format_table
    from tangram.client import TangramError

    try:
        with _client(args) as c:
            s = c.status()
    except TangramError as e:
        raise InputError(str(e)) from None
    act = s["recent_act"]
    rows = [["policy", s["policy"]], ["pending", s["pending"]], ["running", s["running"]],
            ["finished", sum(v for k, v in s["states"].items() if k not in ("pending", "running"))],
            ["trajectories", s["trajectories"]], ["resumed", s["resumed"]],
            ["recent ACT mean/p50/p99 s", "/".join("-" if act[k] is None else f"{act[k]:.3f}"
                                                   for k in ("mean_s", "p50_s", "p99_s"))],
            ["epochs", s["epochs"]], ["max epoch lag s", round(s["max_epoch_lag_s"], 4)]]
    rows += [[f"busy {pool}", f"{100 * b:.0f}%"] for pool, b in s["pools"]["busy"].items()]
    print(format_table(["field", "value"], rows))
    return 0


def _demo(args) -> int:
    from tangram.demo import run_demo

    summary = run_demo(mbpp=args.mbpp, humaneval=args.humaneval, solver=args.solver, seed=args.seed,
                       policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()), out=args.out)
    return 0 if all(r["lost"] == 0 for r in summary["policies"].values()) else 1


def _experiment_commands(sub) -> None:
    from tangram.experiment import POLICIES

    sm = sub.add_parser("simulate", help="replay a scenario's RL step under one policy, journal every event")
    sm.add_argument("scenario", type=Path, help="scenario TOML (see instances/scenarios/)")
    sm.add_argument("--policy", required=True, choices=POLICIES)
    sm.add_argument("--seed", type=int, default=None, help="workload seed (default: the scenario's)")
    sm.add_argument("--output", "-o", type=Path, required=True, help="the run's JSONL journal")
    sm.add_argument("--cores", type=int, default=None, help="baselines: fixed cores per action / sandbox")
    sm.add_argument("--max-trajectories", type=int, default=None, help="trajectory-bound: the semaphore")
    sm.add_argument("--tune", action="store_true", help="baselines: search their best configuration first")
    sm.add_argument("--planner", action="store_true", help="tangram: GPU capacity planner in the loop")
    sm.set_defaults(run=_simulate)

    ex = sub.add_parser("experiment", help="experiments")
    esub = ex.add_subparsers(title="experiments")
    pp = esub.add_parser("paper", help="Tangram against the baselines, ablations, resource saving")
    pp.add_argument("--scenario", type=Path, default=None, help="default: instances/scenarios/default.toml")
    pp.add_argument("--quick", action="store_true", help="the small scenario (instances/scenarios/quick.toml)")
    pp.add_argument("--seed", type=int, default=None)
    pp.add_argument("--output", "-o", type=Path, required=True, help="result JSON")
    pp.add_argument("--plots", type=Path, default=None, help="journals, plots and report.md of the headline runs")
    pp.set_defaults(run=_experiment_paper)

    rp = sub.add_parser("report", help="ACT, step time, utilisation, Gantt and solver statistics of recorded runs")
    rp.add_argument("runs", type=Path, nargs="+", help="JSONL journals (from tangram simulate)")
    rp.add_argument("--output", "-o", type=Path, required=True, help="directory for PNGs and report.md")
    rp.set_defaults(run=_report)


def _scenario(path: Path):
    from pydantic import ValidationError

    from tangram.io.files import describe
    from tangram.workload.scenario import load_scenario

    try:
        return load_scenario(path)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc)}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: {exc}") from None


def _simulate(args) -> int:
    from tangram.analysis.tables import format_table
    from tangram.experiment import BASELINES, make_setup, run_policy, tune

    setup = make_setup(_scenario(args.scenario), args.seed)
    params: dict = {}
    if args.policy in BASELINES:
        if args.tune:
            params, _ = tune(setup, args.policy)
        if args.cores is not None:
            params["cores"] = args.cores
        if args.max_trajectories is not None:
            params["max_trajectories"] = args.max_trajectories
    elif args.planner:
        params["planner"] = True
    _, m = run_policy(setup, args.policy, journal_path=args.output, **params)
    keys = ["count", "mean_act_s", "p50_act_s", "p99_act_s", "step_s", "resource_seconds", "cpu_utilisation",
            "gpu_utilisation", "wall_s", "actions_per_min"]
    print(format_table(["metric", "value"], [[k, m[k]] for k in keys]))
    print(f"\n{args.policy} {params or ''} journal: {args.output}")
    return 0


def _experiment_paper(args) -> int:
    from tangram.analysis.tables import format_table
    from tangram.experiment import paper, result_table

    default = Path("instances/scenarios") / ("quick.toml" if args.quick else "default.toml")
    doc = paper(_scenario(args.scenario or default), seed=args.seed, plots=args.plots)
    doc["quick"] = bool(args.quick)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2))
    print(format_table(*result_table(doc)))
    print(f"\nspeedups and saving of {doc['comparisons']['trajectory-bound']['vs']} against each baseline; "
          f"{doc['wall_s']:.0f} s; result: {args.output}")
    return 0


def _report(args) -> int:
    from tangram.analysis.report import write_report

    for r in args.runs:
        if not r.exists():
            raise InputError(f"{r}: no such run journal")
    path = write_report(args.runs, args.output)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
