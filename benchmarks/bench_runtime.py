"""Runtime benchmarks of the live service on embedded Ray (not tests).

1. Scheduling and dispatch overhead: submit (HTTP client) to start (the quota
   gate actor begins the call) of a trivial action, against a raw Ray actor call
   to the same gate on the same machine, p50 and p99.
2. Sustained throughput of trivial actions through the service (HTTP batches),
   with the epoch loop's largest lag.
3. The demo's ACT and makespan against the trajectory-bound baseline.

Usage: ``python benchmarks/bench_runtime.py [--n-latency 300] [--n-throughput 5000] [--mbpp 60 --humaneval 20]
[--out out/bench_runtime.json]``; ``--skip-demo`` leaves out part 3.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import ray

from tangram.analysis.tables import format_table
from tangram.client import Client
from tangram.service.config import default_config
from tangram.service.server import Service

TOKEN = "bench"
TRIVIAL = {"kind": "api", "quota": "local", "modes": [{"duration_s": 0.001}]}
ECHO = {"call": "echo", "args": {}}


def overhead(service: Service, c: Client, n: int) -> dict[str, float]:
    """Submit-to-start latency, ms, through the service and as a raw actor call (sequential, one at a time)."""
    gate = service.pools.gates["local"]
    raw, via = [], []
    for k in range(n):
        t0 = time.time()
        r = ray.get(gate.call.remote(f"raw{k}", ECHO, t0))
        raw.append(r["started_at"] - t0)
        t0 = time.time()
        c.submit({"id": f"lat{k}", **TRIVIAL}, ECHO)
        rec = c.wait(f"lat{k}")
        via.append(rec["signals"]["queued_s"] + (rec["dispatched_at"] - t0))  # dispatch wait + launch to start
    raw_ms, via_ms = 1000 * np.array(raw), 1000 * np.array(via)
    return {"n": n, "raw_p50_ms": float(np.percentile(raw_ms, 50)), "raw_p99_ms": float(np.percentile(raw_ms, 99)),
            "service_p50_ms": float(np.percentile(via_ms, 50)), "service_p99_ms": float(np.percentile(via_ms, 99)),
            "p50_gap_ms": float(np.percentile(via_ms, 50) - np.percentile(raw_ms, 50))}


def throughput(service: Service, c: Client, n: int, batch: int = 250) -> dict[str, float]:
    """Trivial actions submitted in HTTP batches as fast as the service takes them; actions per second."""
    before = service.runner.status()
    t0 = time.time()
    for b in range(0, n, batch):
        c.submit_many([({"id": f"tp{k}", **TRIVIAL}, ECHO) for k in range(b, min(b + batch, n))])
    submitted = time.time()
    while service.runner.status()["states"].get("ok", 0) - before["states"].get("ok", 0) < n:
        time.sleep(0.05)
        if time.time() - t0 > 300:
            raise TimeoutError("throughput: actions did not finish in 300 s")
    recs = [r for r in service.runner.list(kind="api") if r.id.startswith("tp")]
    end = max(r.finished_at for r in recs)
    s = service.runner.status()
    return {"n": n, "actions_per_s": n / (end - t0), "submit_per_s": n / (submitted - t0), "seconds": end - t0,
            "failed": sum(r.state != "ok" for r in recs), "max_epoch_lag_ms": 1000 * s["max_epoch_lag_s"],
            "max_epoch_ms": 1000 * s["max_epoch_s"], "epochs": s["epochs"] - before["epochs"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-latency", type=int, default=300)
    ap.add_argument("--n-throughput", type=int, default=5000)
    ap.add_argument("--mbpp", type=int, default=60)
    ap.add_argument("--humaneval", type=int, default=20)
    ap.add_argument("--min-interval", type=float, default=None, help="min_epoch_interval_s of the controller")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("out/bench_runtime.json"))
    args = ap.parse_args()

    config = default_config()
    if args.min_interval is not None:
        config = config.model_copy(update={"controller": config.controller.model_copy(
            update={"min_epoch_interval_s": args.min_interval})})
    service = Service(config)
    try:
        url = service.start_http([TOKEN])
        with Client(url, TOKEN) as c:
            for k in range(20):  # warm up the actors, the HTTP path and the estimator
                c.submit({"id": f"warm{k}", **TRIVIAL}, ECHO)
                c.wait(f"warm{k}")
            lat = overhead(service, c, args.n_latency)
            tp = throughput(service, c, args.n_throughput)
    finally:
        service.close()
    report = {"min_epoch_interval_s": config.controller.min_epoch_interval_s, "overhead": lat, "throughput": tp}
    print(format_table(["metric", "value"], [
        ["raw Ray actor call p50 / p99 ms", f"{lat['raw_p50_ms']:.2f} / {lat['raw_p99_ms']:.2f}"],
        ["service submit->start p50 / p99 ms", f"{lat['service_p50_ms']:.2f} / {lat['service_p99_ms']:.2f}"],
        ["p50 gap ms (target <= 5)", f"{lat['p50_gap_ms']:.2f}"],
        ["throughput actions/s (target >= 500)", f"{tp['actions_per_s']:.0f}"],
        ["max epoch lag ms", f"{tp['max_epoch_lag_ms']:.1f}"],
        ["max epoch ms", f"{tp['max_epoch_ms']:.1f}"],
    ]))
    if not args.skip_demo:
        from tangram.demo import run_demo

        report["demo"] = run_demo(mbpp=args.mbpp, humaneval=args.humaneval, out=args.out.parent / "demo")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"written {args.out}")
    ray.shutdown()


if __name__ == "__main__":
    main()
