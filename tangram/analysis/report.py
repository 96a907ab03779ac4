"""Run reports: the metrics of recorded runs as tables, then pictures on top.

A run is the JSONL journal of one simulated (or live) run. ``tangram simulate``
opens it with a ``run`` event that names the policy and the fleet's capacity
(cores, GPUs, training time, GPU core equivalent); everything else is rebuilt
from the journal's events. Analysis functions return plain rows that tests
check; ``plot_*`` functions draw them (``ax=None`` makes a new figure).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tangram.analysis.runs import ActionRecord, act_summary, records_from_events, resource_seconds, utilisation
from tangram.analysis.tables import format_table
from tangram.runtime.journal import Journal


@dataclass
class Run:
    """One recorded run: its header, events and per-action records."""

    meta: dict[str, Any]
    events: list[dict[str, Any]]
    records: list[ActionRecord] = field(default_factory=list)

    @property
    def policy(self) -> str:
        return str(self.meta.get("policy", "run"))


def load_run(path: str | Path) -> Run:
    """Read a journal; its first ``run`` event (if any) is the header."""
    events = list(Journal.read(path))
    meta = next((e for e in events if e["type"] == "run"), {"policy": Path(path).stem})
    return Run(meta=meta, events=events, records=records_from_events(events))


# --------------------------------------------------------------------------- metrics


def held_resource_seconds(records: Sequence[ActionRecord], events: Iterable[dict[str, Any]], end_s: float,
                          gpu_core_equivalent: float = 8.0) -> float:
    """Resource-seconds held: cores + gpu_core_equivalent · GPUs, integrated over time.

    Actions hold what they run on from dispatch to end. A policy that holds
    resources beyond its actions (a trajectory's sandbox cores, dedicated
    replicas or shares) journals ``hold`` / ``release`` events; its held cores
    and GPUs then count from hold to release (or ``end_s``) instead of its actions'.
    """
    held: dict[str, dict] = {}
    total_cores, total_gpus = 0.0, 0.0
    for e in events:
        if e["type"] == "hold":
            held[e["holder"]] = e
        elif e["type"] == "release" and e["holder"] in held:
            h = held.pop(e["holder"])
            total_cores += (e["t"] - h["t"]) * h.get("cores", 0)
            total_gpus += (e["t"] - h["t"]) * len(h.get("gpus", ()))
    any_hold = bool(held) or total_cores > 0 or total_gpus > 0
    for h in held.values():
        total_cores += (end_s - h["t"]) * h.get("cores", 0)
        total_gpus += (end_s - h["t"]) * len(h.get("gpus", ()))
    if not any_hold:
        return resource_seconds(records, gpu_core_equivalent)
    return total_cores + gpu_core_equivalent * total_gpus


def run_metrics(run: Run) -> dict[str, float]:
    """ACT, step time, resource-seconds held and utilisation of one run.

    The rollout runs from the step's start (``meta.start_s``, else the first
    arrival) to the last completion; the step adds ``meta.training_s``.
    Utilisation is busy core- (GPU-) seconds over capacity times rollout.
    """
    recs, meta = run.records, run.meta
    if not recs:
        return {"count": 0}
    start = float(meta.get("start_s", min(r.release_s for r in recs)))
    end = max(r.end_s for r in recs)
    rollout = end - start
    cores, gpus = int(meta.get("cores", 0)), int(meta.get("gpus", 0))
    busy_cores = sum((r.end_s - r.dispatch_s) * r.cores for r in recs)
    busy_gpus = sum((r.end_s - r.dispatch_s) * len(r.gpus) for r in recs)
    gce = float(meta.get("gpu_core_equivalent", 8.0))
    return {**act_summary(recs), "rollout_s": rollout, "step_s": rollout + float(meta.get("training_s", 0.0)),
            "resource_seconds": held_resource_seconds(recs, run.events, end, gce),
            "cpu_utilisation": busy_cores / (cores * rollout) if cores and rollout > 0 else 0.0,
            "gpu_utilisation": busy_gpus / (gpus * rollout) if gpus and rollout > 0 else 0.0,
            "model_load_s": sum(r.load_s for r in recs)}


def policy_table(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row of :func:`run_metrics` per run, with its policy."""
    return [{"policy": r.policy, **run_metrics(r)} for r in runs]


def act_quantiles(run: Run, qs: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)) -> list[tuple[float, float]]:
    """(quantile, ACT seconds) of a run."""
    act = np.array([r.act_s for r in run.records])
    return [(q, float(np.quantile(act, q))) for q in qs] if len(act) else []


def utilisation_timeline(run: Run, bin_s: float = 10.0) -> list[tuple[float, float, float]]:
    """(bin start s, busy fraction of cores, of GPUs) over the run."""
    return utilisation(run.records, int(run.meta.get("cores", 0)), int(run.meta.get("gpus", 0)), bin_s)


def gantt_excerpt(run: Run, limit: int = 40) -> list[ActionRecord]:
    """The first ``limit`` actions to start, by dispatch time."""
    return sorted(run.records, key=lambda r: (r.dispatch_s, r.action))[:limit]


def solver_table(run: Run) -> dict[str, Any]:
    """Solver statistics of a run's epochs: count, time, status mix, fallbacks and gaps."""
    solves = [e for e in run.events if e["type"] == "solve"]
    if not solves:
        return {"epochs_solved": 0}
    times = np.array([e.get("runtime_s", 0.0) for e in solves])
    statuses: dict[str, int] = {}
    fallbacks, gaps = 0, []
    for e in solves:
        statuses[e["status"]] = statuses.get(e["status"], 0) + 1
        attempts = e.get("attempts", [])
        if e.get("solver") == "greedy" and any(a["solver"] != "greedy" for a in attempts):
            fallbacks += 1  # an exact backend ran and the greedy plan was used
        for a in attempts:
            obj, bound = a.get("objective"), a.get("bound")
            if obj is not None and bound is not None and abs(obj) > 1e-9:
                gaps.append(max(0.0, (obj - bound) / abs(obj)))
    return {"epochs_solved": len(solves), "solver": solves[-1].get("solver", ""),
            "mean_solve_s": float(times.mean()), "p99_solve_s": float(np.percentile(times, 99)),
            "total_solve_s": float(times.sum()), "fallbacks": fallbacks,
            "mean_gap": float(np.mean(gaps)) if gaps else None, "statuses": statuses}


# --------------------------------------------------------------------------- plots (thin)


def _ax(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6, 3.5))
    return ax


def plot_act_cdf(runs: Sequence[Run], ax=None):
    """ACT distribution per policy (empirical CDF, log x)."""
    ax = _ax(ax)
    for run in runs:
        act = np.sort([r.act_s for r in run.records])
        ax.plot(np.maximum(act, 1e-3), np.arange(1, len(act) + 1) / max(len(act), 1), label=run.policy)
    ax.set_xscale("log")
    ax.set_xlabel("action completion time (s)")
    ax.set_ylabel("fraction of actions")
    ax.legend(fontsize=7)
    return ax


def plot_steps(rows: Sequence[dict[str, Any]], ax=None):
    """Step time bars per policy (rows of :func:`policy_table`)."""
    ax = _ax(ax)
    ax.bar([r["policy"] for r in rows], [r["step_s"] for r in rows], color="tab:blue")
    ax.set_ylabel("step time (s)")
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    return ax


def plot_utilisation(runs: Sequence[Run], bin_s: float = 10.0, ax=None):
    """Core utilisation over time per policy."""
    ax = _ax(ax)
    for run in runs:
        tl = utilisation_timeline(run, bin_s)
        ax.plot([t for t, _, _ in tl], [c for _, c, _ in tl], label=run.policy, lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("busy cores (fraction)")
    ax.legend(fontsize=7)
    return ax


def plot_gantt_excerpt(run: Run, limit: int = 40, ax=None):
    """The first actions of a run: one bar per action, load in grey, execution coloured by kind."""
    ax = _ax(ax)
    colours = {"cpu": "tab:blue", "gpu": "tab:red", "api": "tab:green"}
    for k, r in enumerate(gantt_excerpt(run, limit)):
        if r.load_s:
            ax.barh(k, r.start_s - r.dispatch_s, left=r.dispatch_s, color="lightgrey")
        ax.barh(k, r.end_s - r.start_s, left=r.start_s, color=colours.get(r.kind, "grey"))
        ax.plot([r.release_s, r.dispatch_s], [k, k], color="black", lw=0.5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("action (by dispatch)")
    ax.set_title(f"{run.policy}: first {limit} actions (line: waiting)", fontsize=8)
    return ax


# --------------------------------------------------------------------------- the report


def write_report(paths: Sequence[str | Path], out: str | Path) -> Path:
    """PNG plots and a Markdown summary of the journals in ``paths``; returns the summary's path."""
    return write_report_runs([load_run(p) for p in paths], out)


def write_report_runs(runs: Sequence[Run], out: str | Path) -> Path:
    """PNG plots and a Markdown summary (``report.md``) of ``runs`` in directory ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = policy_table(runs)

    def save(ax, name: str) -> None:
        ax.figure.tight_layout()
        ax.figure.savefig(out / name, dpi=100)
        plt.close(ax.figure)

    save(plot_act_cdf(runs), "act_cdf.png")
    save(plot_steps(rows), "step_time.png")
    save(plot_utilisation(runs), "utilisation.png")
    for run in runs:
        save(plot_gantt_excerpt(run), f"gantt_{run.policy}.png")
    cols = ["policy", "count", "mean_act_s", "p50_act_s", "p99_act_s", "step_s", "resource_seconds",
            "cpu_utilisation", "gpu_utilisation"]
    lines = ["# Run report", "", "```", format_table(cols, [[r.get(c) for c in cols] for r in rows]), "```", ""]
    for run in runs:
        s = solver_table(run)
        if s["epochs_solved"]:
            lines += [f"- {run.policy}: {s['epochs_solved']} solves by {s['solver']}, mean {s['mean_solve_s']:.4f} s, "
                      f"p99 {s['p99_solve_s']:.4f} s, {s['fallbacks']} fallbacks, statuses {s['statuses']}"
                      + (f", mean gap {s['mean_gap']:.3f}" if s["mean_gap"] is not None else "")]
    lines += ["", "Plots: act_cdf.png (ACT distribution), step_time.png (step time), utilisation.png (busy cores "
              "over time), gantt_<policy>.png (first actions of each run).", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
