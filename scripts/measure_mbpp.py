"""Measure how long each MBPP reference solution takes to run with its tests.

Every problem is run once, sequentially, as a fresh isolated interpreter
(``python -I -c <setup + code + asserts>``) with a 10 s timeout; the wall-clock
time of the whole subprocess (interpreter start included, as a sandboxed
execution pays it) is written with its exit status to
``tangram/data/mbpp_exec.csv``.

    .venv/bin/python scripts/measure_mbpp.py
"""

from __future__ import annotations

import csv
import platform
import subprocess
import sys
import time
from pathlib import Path

from tangram.workload.traces import mbpp

OUT = Path(__file__).resolve().parent.parent / "tangram" / "data" / "mbpp_exec.csv"


def main() -> None:
    rows = []
    for p in mbpp():
        src = "\n".join([p.get("test_setup_code") or "", p["code"], *p["test_list"]])
        t0 = time.perf_counter()
        try:
            rc = subprocess.run([sys.executable, "-I", "-c", src], capture_output=True, timeout=10).returncode
        except subprocess.TimeoutExpired:
            rc = -9
        rows.append((p["task_id"], round(time.perf_counter() - t0, 4), rc))
    with OUT.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task_id", "exec_s", "returncode"])
        w.writerows(rows)
    print(f"{len(rows)} problems -> {OUT} on {platform.python_implementation()} {platform.python_version()}")


if __name__ == "__main__":
    main()
