"""Metrics of a recorded run (simulated or live), as pure functions over records.

Records are rebuilt from the runtime journal (:func:`records_from_events`), so a
simulation and a production run are analysed by the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One finished action. Times in seconds on the run's clock."""

    action: str
    trajectory: str | None
    task: str
    kind: str
    release_s: float  # arrival
    dispatch_s: float  # resources taken (a model load, if any, starts here)
    start_s: float  # execution starts (after the load)
    end_s: float
    mode: int
    node: str | None
    cores: int
    gpus: tuple[str, ...]
    quota: str | None
    duration_s: float  # measured (true) execution time
    load_s: float
    status: str

    @property
    def act_s(self) -> float:
        """Action completion time: end − arrival."""
        return self.end_s - self.release_s


def records_from_events(events: Iterable[dict[str, Any]]) -> list[ActionRecord]:
    """Join accepted / dispatched / completed journal events into records, by completion order.

    Actions never dispatched (cancelled while pending) or never completed are left out.
    """
    accepted: dict[str, dict] = {}
    dispatched: dict[str, dict] = {}
    out = []
    for e in events:
        kind = e["type"]
        if kind == "accepted":
            accepted[e["action"]["id"]] = e
        elif kind == "dispatched":
            dispatched[e["action"]] = e
        elif kind == "completed":
            d, a = dispatched.pop(e["action"], None), accepted.pop(e["action"], None)
            if d is None or a is None:
                continue
            act, asg = a["action"], d["assignment"]
            p = asg.get("placement", {})
            out.append(ActionRecord(
                action=e["action"], trajectory=act.get("trajectory"), task=act.get("task", "default"),
                kind=act["kind"], release_s=act.get("release_s", 0.0), dispatch_s=d["t"],
                start_s=d["t"] + e.get("load_s", 0.0), end_s=e["t"], mode=asg.get("mode", 0), node=p.get("node"),
                cores=p.get("cores", 0), gpus=tuple(p.get("gpus", ())), quota=p.get("quota"),
                duration_s=e.get("duration_s", 0.0), load_s=e.get("load_s", 0.0), status=e["status"]))
    return out


def act_summary(records: Sequence[ActionRecord]) -> dict[str, float]:
    """Mean, p50 and p99 action completion time, seconds (zeros when empty)."""
    if not records:
        return {"count": 0, "mean_act_s": 0.0, "p50_act_s": 0.0, "p99_act_s": 0.0}
    act = np.array([r.act_s for r in records])
    return {"count": len(records), "mean_act_s": float(act.mean()), "p50_act_s": float(np.percentile(act, 50)),
            "p99_act_s": float(np.percentile(act, 99))}


def makespan(records: Sequence[ActionRecord]) -> float:
    """Last end − first arrival, seconds."""
    if not records:
        return 0.0
    return max(r.end_s for r in records) - min(r.release_s for r in records)


def resource_seconds(records: Sequence[ActionRecord], gpu_core_equivalent: float = 8.0) -> float:
    """Σ held time · (cores + gpu_core_equivalent · GPUs); held from dispatch (loads hold GPUs) to end."""
    return float(sum((r.end_s - r.dispatch_s) * (r.cores + gpu_core_equivalent * len(r.gpus)) for r in records))


def utilisation(records: Sequence[ActionRecord], total_cores: int, total_gpus: int,
                bin_s: float = 1.0) -> list[tuple[float, float, float]]:
    """(bin start s, busy fraction of cores, of GPUs) per bin, from the first arrival to the last end."""
    if not records or bin_s <= 0:
        return []
    t0, t1 = min(r.release_s for r in records), max(r.end_s for r in records)
    n = max(1, int(np.ceil((t1 - t0) / bin_s)))
    cores, gpus = np.zeros(n), np.zeros(n)
    edges = t0 + bin_s * np.arange(n + 1)
    for r in records:
        overlap = np.clip(np.minimum(edges[1:], r.end_s) - np.maximum(edges[:-1], r.dispatch_s), 0, None)
        cores += overlap * r.cores
        gpus += overlap * len(r.gpus)
    cf = cores / (bin_s * total_cores) if total_cores else np.zeros(n)
    gf = gpus / (bin_s * total_gpus) if total_gpus else np.zeros(n)
    return [(float(edges[k]), float(cf[k]), float(gf[k])) for k in range(n)]


def summarise(records: Sequence[ActionRecord], gpu_core_equivalent: float = 8.0) -> dict[str, float]:
    """The headline numbers of a run."""
    return {**act_summary(records), "makespan_s": makespan(records),
            "resource_seconds": resource_seconds(records, gpu_core_equivalent)}
