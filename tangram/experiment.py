"""The paper experiment: Tangram against today's provisioning on one RL step.

Every policy replays the same workload (a scenario's step, one seed) on the
same fleet through the same simulator and pools. Each baseline first gets its
best configuration by its own step time (ties: mean ACT):

* trajectory-bound: cores per sandbox in {1, 2, 4, 8} x semaphore in
  {batch, 3/4 batch, 1/2 batch}; GPU replicas per (task, model) sized to the
  step's true GPU work (:func:`~tangram.runtime.sim.baselines.partition_gpus`);
* task-isolated: fixed degree in {1, 2, 4, 8}; core shares proportional to each
  task's true CPU work, GPUs as above;
* shared FIFO: fixed degree in {1, 2, 4, 8}.

Tangram runs deterministically with the greedy and the CP-SAT backend.
Resource saving against a baseline is ``1 - units(F) / units(F0)`` for the
smallest scaled fleet ``F`` on which Tangram (greedy) still matches the
baseline's step time on the full fleet ``F0`` (units: cores + GPU core
equivalents); the scale is searched on a grid, then bisected.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangram.analysis.report import Run, run_metrics, solver_table
from tangram.model.instance import Constraints
from tangram.runtime.controller import ControllerConfig, Fleet, PolicyFactory
from tangram.runtime.estimator import OracleEstimator
from tangram.runtime.journal import Journal
from tangram.runtime.planner import planned_policy
from tangram.runtime.sim import SharedFifoPolicy, simulate, tangram_policy
from tangram.runtime.sim.baselines import (
    TaskIsolatedPolicy,
    TrajectoryBoundPolicy,
    cpu_demand,
    gpu_demand,
    partition_gpus,
    split_cores,
)
from tangram.runtime.sim.workload import Workload
from tangram.workload.scenario import Scenario

BASELINES = ("trajectory-bound", "task-isolated", "shared-fifo")
TANGRAM = ("tangram-greedy", "tangram-cpsat")
POLICIES = BASELINES + TANGRAM
HEADLINE = "tangram-cpsat"
DEGREES = (1, 2, 4, 8)
#: CP-SAT per epoch: deterministic budget (s) and the most urgent actions it models exactly.
CPSAT = dict(time_limit_s=0.01, exact_window=8)


@dataclass(frozen=True)
class Setup:
    """One scenario's step on one fleet."""

    scenario: Scenario
    fleet: Fleet
    workload: Workload
    scale: float = 1.0


def make_setup(scenario: Scenario, seed: int | None = None, scale: float = 1.0) -> Setup:
    return Setup(scenario, scenario.build_fleet(scale), scenario.workload(seed), scale)


def policy_factory(setup: Setup, policy: str, **params: Any) -> PolicyFactory:
    """The simulator policy ``policy`` with ``params`` (see the module docstring for their meaning).

    Tangram policies take ``elastic`` (water-fill cores), ``residency`` (False:
    plan blind to model residency, load times and GPU memory; the pools still
    charge every load), ``oracle`` (plan with the true durations) and
    ``planner`` (the GPU capacity planner).
    """
    fleet, w = setup.fleet, setup.workload
    if policy == "trajectory-bound":
        return TrajectoryBoundPolicy.factory(params.get("cores", 1), params.get("max_trajectories", 1 << 30),
                                             partition_gpus(fleet, gpu_demand(w, fleet)))
    if policy == "task-isolated":
        demand = cpu_demand(w)
        total = sum(demand.values()) or 1.0
        shares = split_cores(fleet, {t: d / total for t, d in demand.items()})
        return TaskIsolatedPolicy.factory(shares, partition_gpus(fleet, gpu_demand(w, fleet)), params.get("cores", 1))
    if policy == "shared-fifo":
        return SharedFifoPolicy.factory(cores=params.get("cores", 1), gpus=1)
    if policy in TANGRAM:
        cpsat = policy == "tangram-cpsat"
        residency = params.get("residency", True)
        config = ControllerConfig(solver="cpsat" if cpsat else "greedy", deterministic=True,
                                  elastic=params.get("elastic", True), residency_aware=residency,
                                  constraints=Constraints(model_residency=residency), **(CPSAT if cpsat else {}))
        estimator = OracleEstimator(w.truth()) if params.get("oracle") else None
        if params.get("planner"):
            return planned_policy(config, estimator)
        return tangram_policy(config, estimator)
    raise ValueError(f"policy: unknown {policy!r}; choose from {', '.join(POLICIES)}")


def run_policy(setup: Setup, policy: str, label: str | None = None, journal_path: str | Path | None = None,
               **params: Any) -> tuple[Run, dict[str, float]]:
    """Simulate one policy; the journal (if a path is given) starts with a ``run`` header."""
    start = min((t.start_s for t in setup.workload.trajectories), default=0.0)
    meta = dict(policy=label or policy, scenario=setup.scenario.name, workload=setup.workload.name,
                scale=setup.scale, cores=sum(n.cores for n in setup.fleet.nodes), gpus=len(setup.fleet.gpus),
                training_s=setup.scenario.training_s, start_s=start,
                gpu_core_equivalent=setup.scenario.gpu_core_equivalent, params=params)
    if journal_path is not None:
        Path(journal_path).unlink(missing_ok=True)
        with Journal(journal_path) as j:
            j.append("run", start, **meta)
    sim = simulate(setup.workload, setup.fleet, policy_factory(setup, policy, **params),
                   str(journal_path) if journal_path is not None else None)
    run = Run({"type": "run", **meta}, sim.events, sim.records)
    m = run_metrics(run)
    m.update(wall_s=sim.wall_s, solve_s=sim.solve_s, epochs=sim.epochs,
             actions_per_min=len(sim.records) / max(sim.wall_s, 1e-9) * 60)
    return run, m


def _key(m: dict[str, float]) -> tuple[float, float]:
    return (round(m["step_s"], 6), m["mean_act_s"])


def tune(setup: Setup, policy: str, tick: Callable[[str], None] = lambda s: None) -> tuple[dict, list]:
    """The baseline's best parameters by its own step time (then mean ACT), and every trial."""
    batch = len(setup.workload.trajectories)
    if policy == "trajectory-bound":
        grid = [dict(cores=c, max_trajectories=s) for c in DEGREES
                for s in sorted({batch, max(1, 3 * batch // 4), max(1, batch // 2)}, reverse=True)]
    else:
        grid = [dict(cores=c) for c in DEGREES]
    trials = []
    for params in grid:
        _, m = run_policy(setup, policy, **params)
        trials.append((params, m["step_s"], m["mean_act_s"]))
        tick(f"tune {policy} {params}")
    best = min(trials, key=lambda t: (round(t[1], 6), t[2]))[0]
    return best, trials


def smallest_fleet(scenario: Scenario, seed: int | None, targets: dict[str, float],
                   scales: tuple[float, ...] = (1.0, 0.75, 0.5, 0.35, 0.25, 0.18, 0.125), refine: int = 2,
                   tick: Callable[[str], None] = lambda s: None, **params: Any) -> dict[str, dict[str, float]]:
    """Per target step time: the smallest fleet scale on which Tangram greedy's step is no longer.

    A scale counts only when every larger grid scale also matches (so a lucky
    small fleet never hides a miss); then ``refine`` bisection steps between it
    and the next grid scale. An infeasible fleet (a model fits no GPU left) misses.
    """
    full_units = scenario.fleet_units(scenario.build_fleet(1.0))
    cache: dict[float, float] = {}

    def step(scale: float) -> float:
        if scale not in cache:
            try:
                _, m = run_policy(make_setup(scenario, seed, scale), "tangram-greedy", **params)
                cache[scale] = m["step_s"]
            except (ValueError, RuntimeError):
                cache[scale] = float("inf")
            tick(f"fleet x{scale:.3f}")
        return cache[scale]

    out = {}
    for name, target in targets.items():
        ok = None
        for k, s in enumerate(scales):
            if step(s) <= target + 1e-9:
                ok = k
            else:
                break
        if ok is None:
            out[name] = {"scale": None, "fleet_fraction": None, "resource_saving": 0.0, "target_step_s": target}
            continue
        lo_ok = scales[ok]
        if ok + 1 < len(scales):
            hi_miss = scales[ok + 1]
            for _ in range(refine):
                mid = round((lo_ok + hi_miss) / 2, 4)
                if step(mid) <= target + 1e-9:
                    lo_ok = mid
                else:
                    hi_miss = mid
        frac = scenario.fleet_units(scenario.build_fleet(lo_ok)) / full_units
        out[name] = {"scale": lo_ok, "fleet_fraction": frac, "resource_saving": 1.0 - frac, "target_step_s": target,
                     "tangram_step_s": cache[lo_ok]}
    return out


ABLATIONS = {
    "no-elastic": dict(elastic=False),
    "no-residency": dict(residency=False),
    "oracle-durations": dict(oracle=True),
    "planner": dict(planner=True),
}


def paper(scenario: Scenario, seed: int | None = None, plots: str | Path | None = None,
          progress: bool = True) -> dict[str, Any]:
    """Run the headline comparison, the ablations and the resource-saving search.

    Returns the result document (see docs/experiment.md); with ``plots``, the
    journals of the headline runs and the report's plots go there.
    """
    from tqdm import tqdm

    t0 = time.perf_counter()
    setup = make_setup(scenario, seed)
    batch = len(setup.workload.trajectories)
    n_trials = 4 * len({batch, max(1, 3 * batch // 4), max(1, batch // 2)}) + 8
    bar = tqdm(total=n_trials + len(POLICIES) + len(ABLATIONS) + 13, disable=not progress, unit="run")

    def tick(desc: str) -> None:
        bar.set_postfix_str(desc[:40])
        bar.update()

    plots = Path(plots) if plots is not None else None
    tuning, params = {}, {}
    for b in BASELINES:
        params[b], trials = tune(setup, b, tick)
        tuning[b] = [{"params": p, "step_s": s, "mean_act_s": a} for p, s, a in trials]
    runs, results = [], {}
    for p in POLICIES:
        journal = plots / f"{p}.jsonl" if plots is not None else None
        run, m = run_policy(setup, p, journal_path=journal, **params.get(p, {}))
        runs.append(run)
        results[p] = _policy_row(m, params.get(p, {}))
        if p in TANGRAM:
            results[p]["solver"] = solver_table(run)  # epochs, time, fallbacks: did the exact backend run?
        tick(p)
    ablations = {"greedy-instead-of-cpsat": _policy_row(run_metrics(runs[POLICIES.index("tangram-greedy")]), {})}
    for name, kw in ABLATIONS.items():
        _, m = run_policy(setup, "tangram-greedy", label=f"tangram-greedy/{name}", **kw)
        ablations[name] = _policy_row(m, kw)
        tick(name)
    saving = smallest_fleet(scenario, seed, {b: results[b]["step_s"] for b in BASELINES}, tick=tick)
    bar.close()
    head = results[HEADLINE]
    comparisons = {b: {"vs": HEADLINE, "speedup_act": results[b]["mean_act_s"] / head["mean_act_s"],
                       "speedup_p99_act": results[b]["p99_act_s"] / head["p99_act_s"],
                       "speedup_step": results[b]["step_s"] / head["step_s"],
                       "speedup_act_greedy": results[b]["mean_act_s"] / results["tangram-greedy"]["mean_act_s"],
                       "resource_seconds_ratio": results[b]["resource_seconds"] / head["resource_seconds"],
                       "resource_saving": saving[b]["resource_saving"], "saving_search": saving[b]}
                   for b in BASELINES}
    doc = {"experiment": "paper", "scenario": scenario.name, "seed": scenario.seed if seed is None else seed,
           "workload": {"trajectories": batch, "actions": setup.workload.num_actions},
           "fleet": {"cores": sum(n.cores for n in setup.fleet.nodes), "gpus": len(setup.fleet.gpus),
                     "units": scenario.fleet_units(setup.fleet)},
           "policies": results, "comparisons": comparisons, "ablations": ablations, "tuning": tuning,
           "sim_speed": {"greedy_actions_per_min": results["tangram-greedy"]["actions_per_min"]},
           "wall_s": time.perf_counter() - t0}
    if plots is not None:
        from tangram.analysis.report import write_report_runs

        write_report_runs(runs, plots)
    return doc


def _policy_row(m: dict[str, float], params: dict) -> dict[str, Any]:
    keys = ("count", "mean_act_s", "p50_act_s", "p99_act_s", "step_s", "rollout_s", "resource_seconds",
            "model_load_s", "wall_s", "solve_s", "actions_per_min")
    return {"params": params, **{k: m[k] for k in keys if k in m},
            "utilisation": {"cpu": m.get("cpu_utilisation", 0.0), "gpu": m.get("gpu_utilisation", 0.0)}}


def result_table(doc: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of the fixed-width summary of a :func:`paper` result."""
    headers = ["policy", "mean_act_s", "p50_act_s", "p99_act_s", "step_s", "resource_s", "cpu_util", "gpu_util",
               "speedup_act", "speedup_step", "saving"]
    rows = []
    for p, r in doc["policies"].items():
        c = doc["comparisons"].get(p, {})
        rows.append([p, r["mean_act_s"], r["p50_act_s"], r["p99_act_s"], r["step_s"], r["resource_seconds"],
                     r["utilisation"]["cpu"], r["utilisation"]["gpu"], c.get("speedup_act"), c.get("speedup_step"),
                     c.get("resource_saving")])
    for name, r in doc["ablations"].items():
        rows.append([f"ablation:{name}", r["mean_act_s"], r["p50_act_s"], r["p99_act_s"], r["step_s"],
                     r["resource_seconds"], r["utilisation"]["cpu"], r["utilisation"]["gpu"], None, None, None])
    return headers, rows
