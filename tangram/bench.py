"""Solver benchmarks on realistic epochs (see :mod:`tangram.workload.epoch`)."""

from __future__ import annotations

import statistics
import time

from tangram.model.compiled import compile_instance
from tangram.solver import SolveConfig, solve
from tangram.workload.epoch import realistic_epoch


def bench_solver(actions: int = 200, nodes: int = 50, gpus: int = 32, solver: str = "greedy",
                 time_limit_s: float = 1.0, window: int | None = None, seed: int = 0, repeat: int = 3,
                 tick_s: float = 0.01) -> dict:
    """Time whole epochs (compile + solve + map back) as the runtime runs them, then
    report their quality.

    The first epoch is cold: every action is new, so its options are enumerated.
    Later repetitions are warm, as for actions that stay pending across epochs
    (per-action work is cached on the fleet). Timed epochs skip the relaxation
    bound, as the runtime does; one extra untimed solve adds it for the gap.
    """
    instance = realistic_epoch(actions=actions, nodes=nodes, gpus=gpus, seed=seed)
    config = SolveConfig(time_limit_s=time_limit_s, window=window, tick_s=tick_s, fallback=("greedy",),
                         relaxation_bound=False)
    epochs, compiles = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        compiled = compile_instance(instance, tick_s)
        t1 = time.perf_counter()
        solve(compiled, solver=solver, config=config)
        epochs.append(time.perf_counter() - t0)
        compiles.append(t1 - t0)
    t0 = time.perf_counter()
    result = solve(instance, solver=solver, config=config.model_copy(update={"relaxation_bound": True}))
    bound_s = time.perf_counter() - t0 - sum(a.runtime_s for a in result.attempts)
    attempt = next((a for a in result.attempts if a.solver == solver), None)
    # Exact backends are warm-started by greedy, so its objective is always among the attempts.
    greedy_objective = next((a.objective for a in result.attempts if a.solver == "greedy"), None)
    return {
        "instance": instance.name, "solver": solver, "actions": actions, "nodes": nodes, "gpus": gpus,
        "window": window, "time_limit_s": time_limit_s, "status": result.status.value, "used": result.solver,
        "epoch_cold_s": epochs[0], "epoch_s": statistics.median(epochs[1:] or epochs),
        "compile_s": statistics.median(compiles), "bound_s": bound_s,
        "backend_s": attempt.runtime_s if attempt else None,
        "objective": result.objective, "bound": result.bound, "gap": result.gap,
        "greedy_objective": greedy_objective,
        "vs_greedy": None if not greedy_objective else result.objective / greedy_objective,
    }
