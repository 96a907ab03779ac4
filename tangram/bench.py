"""Solver benchmarks on realistic epochs (see :mod:`tangram.workload.epoch`)."""

from __future__ import annotations

import statistics
import time

from tangram.model.compiled import compile_instance
from tangram.solver import SolveConfig, backend, solve
from tangram.workload.epoch import realistic_epoch


def bench_solver(actions: int = 200, nodes: int = 50, gpus: int = 32, solver: str = "greedy",
                 time_limit_s: float = 1.0, window: int | None = None, seed: int = 0, repeat: int = 3,
                 tick_s: float = 0.01) -> dict:
    """Time whole epochs (compile + solve + map back) and report their quality.

    Returns the median epoch time over ``repeat`` runs, the compile and backend
    shares, the objective, the proven bound and gap, and the greedy objective of
    the same epoch for comparison.
    """
    instance = realistic_epoch(actions=actions, nodes=nodes, gpus=gpus, seed=seed)
    config = SolveConfig(time_limit_s=time_limit_s, window=window, tick_s=tick_s, fallback=("greedy",))
    epochs, compiles, results = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        compiled = compile_instance(instance, tick_s)
        t1 = time.perf_counter()
        results.append(solve(compiled, solver=solver, config=config))
        epochs.append(time.perf_counter() - t0)
        compiles.append(t1 - t0)
    result = results[-1]
    attempt = next((a for a in result.attempts if a.solver == solver), None)
    greedy = next((a for a in result.attempts if a.solver == "greedy"), None)
    if greedy is None:  # the greedy backend alone, timed on a fresh compile for comparison
        g = backend("greedy").solve(compile_instance(instance, tick_s), config, None)
        greedy_objective = None if g.plan is None else solve(instance, "greedy", config).objective
    else:
        greedy_objective = greedy.objective
    return {
        "instance": instance.name, "solver": solver, "actions": actions, "nodes": nodes, "gpus": gpus,
        "window": window, "time_limit_s": time_limit_s, "status": result.status.value, "used": result.solver,
        "epoch_s": statistics.median(epochs), "compile_s": statistics.median(compiles),
        "backend_s": attempt.runtime_s if attempt else None,
        "objective": result.objective, "bound": result.bound, "gap": result.gap,
        "greedy_objective": greedy_objective,
        "vs_greedy": None if not greedy_objective else result.objective / greedy_objective,
    }
