"""Inspection of solved schedules: tables first (tests check them), pictures on top."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tangram.model.instance import Instance
from tangram.model.schedule import Result


@dataclass(frozen=True)
class Bar:
    """One action's occupancy of one resource row."""

    resource: str
    action: str
    start_s: float
    end_s: float
    units: int


def timeline(result: Result) -> list[Bar]:
    """Every (resource, action) occupancy, ordered by resource then start."""
    bars = []
    for a in result.schedule:
        p = a.placement
        if p.node:
            bars.append(Bar(f"node {p.node}", a.action, a.start_s, a.end_s, p.cores))
        bars += [Bar(f"gpu {g}", a.action, a.start_s, a.end_s, 1) for g in p.gpus]
        if p.quota:
            bars.append(Bar(f"api {p.quota}", a.action, a.start_s, a.end_s, 1))
        if not (p.node or p.gpus or p.quota):
            bars.append(Bar("other", a.action, a.start_s, a.end_s, 1))
    return sorted(bars, key=lambda b: (b.resource, b.start_s, b.action))


def utilisation(result: Result, instance: Instance | None = None) -> list[dict]:
    """Per resource: busy unit-seconds and, given the instance, utilisation over the makespan."""
    busy: dict[str, float] = defaultdict(float)
    for b in timeline(result):
        busy[b.resource] += b.units * (b.end_s - b.start_s)
    span = result.metrics.makespan_s if result.metrics else 0.0
    caps: dict[str, float] = {}
    if instance is not None:
        caps.update({f"node {n.id}": n.cores for n in instance.nodes})
        caps.update({f"gpu {g.id}": 1 for g in instance.gpus})
        caps.update({f"api {q.id}": q.concurrency for q in instance.quotas})
    rows = []
    for resource in sorted(busy.keys() | caps.keys()):
        cap = caps.get(resource)
        util = busy[resource] / (cap * span) if cap and span > 0 else None
        rows.append({"resource": resource, "busy_unit_s": busy[resource], "capacity": cap, "utilisation": util})
    return rows


def plot_gantt(result: Result, ax=None, max_rows: int = 40):
    """A Gantt chart, one row per resource (the busiest ``max_rows``), bars coloured by action."""
    import matplotlib.pyplot as plt

    bars = timeline(result)
    load: dict[str, float] = defaultdict(float)
    for b in bars:
        load[b.resource] += b.end_s - b.start_s
    rows = sorted(load, key=lambda r: -load[r])[:max_rows]
    rows.sort()
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 0.35 * len(rows) + 1.5))
    cmap = plt.get_cmap("tab20")
    colour = {a: cmap(k % 20) for k, a in enumerate(dict.fromkeys(b.action for b in bars))}
    for y, row in enumerate(rows):
        for b in (b for b in bars if b.resource == row):
            ax.barh(y, b.end_s - b.start_s, left=b.start_s, color=colour[b.action], edgecolor="black", linewidth=0.3)
            if len(bars) <= 60:
                ax.text(b.start_s + (b.end_s - b.start_s) / 2, y, b.action, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(f"{result.instance}: {result.solver} {result.status.value}, objective {result.objective or 0:.4g}")
    return ax


def summary_rows(result: Result) -> list[tuple[str, str]]:
    """Key facts of a result as (label, value) pairs for a fixed-width table."""
    m = result.metrics
    gap = result.gap
    rows = [
        ("instance", result.instance),
        ("status", result.status.value),
        ("solver", result.solver or "-"),
        ("objective", f"{result.objective:.6g}" if result.objective is not None else "-"),
        ("bound", f"{result.bound:.6g}" if result.bound is not None else "-"),
        ("gap", f"{100 * gap:.2f}%" if gap is not None else "-"),
        ("runtime_s", f"{result.runtime_s:.3f}"),
        ("actions", str(len(result.schedule))),
    ]
    if m is not None:
        rows += [("mean_act_s", f"{m.mean_act_s:.3f}"), ("p99_act_s", f"{m.p99_act_s:.3f}"),
                 ("makespan_s", f"{m.makespan_s:.3f}"), ("model_load_s", f"{m.model_load_s:.3f}"),
                 ("resource_seconds", f"{m.resource_seconds:.1f}")]
    rows.append(("attempts", ", ".join(f"{a.solver}:{a.status.value}({a.runtime_s:.2f}s)" for a in result.attempts)))
    return rows
