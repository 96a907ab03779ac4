"""Loaders for the bundled real traces (see tangram/data/README.md for provenance).

Each loader returns plain numpy arrays or records and caches them; workload
builders sample from these empirical distributions instead of inventing numbers.
"""

from __future__ import annotations

import csv
import json
from functools import cache
from importlib import resources

import numpy as np


def _rows(name: str) -> list[dict[str, str]]:
    with resources.files("tangram.data").joinpath(name).open(newline="") as f:
        return list(csv.DictReader(f))


@cache
def terminal_bench() -> dict[str, np.ndarray]:
    """Terminal-Bench trial phases, seconds: setup_s, agent_s, test_s (+ resolved, timeout flags)."""
    rows = _rows("terminal_bench_trials.csv")
    out = {k: np.array([float(r[k]) for r in rows]) for k in ("setup_s", "agent_s", "test_s")}
    out["resolved"] = np.array([r["resolved"] == "1" for r in rows])
    out["timeout"] = np.array([r["failure_mode"].endswith("timeout") for r in rows])
    return out


@cache
def genai_exec_s() -> np.ndarray:
    """Execution times of successful GPU inference requests (Alibaba GenAI), seconds."""
    return np.array([float(r["exec_time_seconds"]) for r in _rows("alibaba_genai_requests.csv")
                     if r["predict_status"] == "SUCCEED" and float(r["exec_time_seconds"]) > 0])


@cache
def genai_load_s(component: str = "base_model") -> np.ndarray:
    """Model load latencies (Alibaba GenAI) of one component, seconds."""
    vals = [float(r["latency_ms"]) / 1000 for r in _rows("alibaba_genai_model_load.csv") if r["component"] == component]
    if not vals:
        raise ValueError(f"component: unknown load component {component!r}")
    return np.array(vals)


@cache
def gpu_nodes() -> list[dict[str, object]]:
    """Alibaba GPU cluster nodes: cores, memory GiB, gpus, GPU type ('' for CPU-only)."""
    return [{"id": r["sn"], "cores": int(r["cpu_milli"]) // 1000, "memory_gb": int(r["memory_mib"]) / 1024,
             "gpus": int(r["gpu"]), "type": r["model"]} for r in _rows("alibaba_gpu_nodes.csv")]


@cache
def azure_tokens(service: str = "conv") -> np.ndarray:
    """(context, generated) token counts of Azure LLM requests; service 'conv' or 'code'."""
    rows = _rows(f"azure_llm_{service}.csv")
    return np.array([(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows])


@cache
def mbpp() -> list[dict]:
    """The 974 MBPP problems: text, code, test_list, test_setup_code, task_id."""
    text = resources.files("tangram.data").joinpath("mbpp.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
