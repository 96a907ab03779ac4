"""The ordered backend registry and the one front door, :func:`solve`."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass

from tangram.model.check import evaluate, hosting, metrics
from tangram.model.compiled import Compiled, compile_instance
from tangram.model.instance import Instance
from tangram.model.schedule import Assignment, Attempt, Result, SolveStatus
from tangram.solver.base import Backend, Outcome, Plan
from tangram.solver.bound import lower_bound
from tangram.solver.config import SolveConfig

# name -> "module:Class"; optional backends are imported only when used.
BACKENDS: dict[str, str] = {
    "cpsat": "tangram.solver.cpsat:CpSatBackend",
    "milp": "tangram.solver.milp:MilpBackend",
    "greedy": "tangram.solver.greedy:GreedyBackend",
}

# A proven verdict ends the chain: no fallback can do better. (MODEL_INVALID is a
# backend's own failure, so the chain goes on.)
_FINAL = (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)


def backend(name: str) -> Backend:
    """Instantiate a registered backend by name."""
    if name not in BACKENDS:
        raise ValueError(f"solver: unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def solve(
    instance: Instance | Compiled,
    solver: str = "cpsat",
    config: SolveConfig | None = None,
    initial: Plan | None = None,
) -> Result:
    """Solve an instance with ``solver``, then ``config.fallback`` in order.

    Exact backends are warm-started from the greedy plan (``config.warm_start``).
    The reported bound is the best of the backends' proven bounds and, with
    ``config.relaxation_bound``, the relaxations of :mod:`tangram.solver.bound`.
    Every attempt is recorded; the schedule is mapped back to ids and seconds
    and its objective recomputed by :func:`tangram.model.check.evaluate`, so the
    result never claims more than its schedule shows or its backend proved.
    """
    config = config or SolveConfig()
    t0 = time.perf_counter()
    compiled = instance if isinstance(instance, Compiled) else compile_instance(instance, config.tick_s)
    chain = list(dict.fromkeys([solver, *config.fallback]))
    attempts: list[Attempt] = []
    done: dict[str, _Tried] = {}  # the warm start is also the greedy fallback
    hint = initial
    if hint is None and config.warm_start and any(backend(n).exact for n in chain):
        done["greedy"] = _attempt(backend("greedy"), compiled, config, None, attempts)
        hint = done["greedy"].outcome.plan
    chosen: _Tried | None = None
    bound: float | None = lower_bound(compiled) if config.relaxation_bound else None
    verdict: SolveStatus | None = None
    for name in chain:
        tried = done.get(name) or _attempt(backend(name), compiled, config, hint, attempts)
        outcome = tried.outcome
        if outcome.bound is not None:
            bound = outcome.bound if bound is None else max(bound, outcome.bound)
        if tried.schedule is not None:
            chosen = tried
            break
        if outcome.status in _FINAL:
            verdict = outcome.status
            break
    return _result(compiled, chosen, bound, verdict, attempts, time.perf_counter() - t0)


@dataclass
class _Tried:
    """One backend run: its outcome and, when it has a plan, the schedule and its objective."""

    name: str
    outcome: Outcome
    schedule: list[Assignment] | None = None
    objective: float | None = None


def _attempt(b: Backend, compiled: Compiled, config: SolveConfig, hint: Plan | None,
             attempts: list[Attempt]) -> _Tried:
    t0 = time.perf_counter()
    if not b.is_installed():
        outcome = Outcome(SolveStatus.ERROR, message=f"{b.name} is not installed")
    else:
        try:
            outcome = b.solve(compiled, config, hint)
        except Exception as exc:  # a failing backend is an attempt, not a crash
            outcome = Outcome(SolveStatus.ERROR, message=f"{type(exc).__name__}: {exc}")
    tried = _Tried(b.name, outcome)
    if outcome.status.has_solution() and outcome.plan is not None:
        tried.schedule = to_schedule(compiled, outcome.plan)
        tried.objective = evaluate(compiled.instance, tried.schedule)
    attempts.append(Attempt(solver=b.name, status=outcome.status, runtime_s=time.perf_counter() - t0,
                            objective=tried.objective, bound=outcome.bound, message=outcome.message))
    return tried


def to_schedule(compiled: Compiled, plan: Plan) -> list[Assignment]:
    """A compiled plan as assignments in ids and seconds."""
    return [compiled.assignment(i, compiled.option(i, k), start) for i, (k, start) in enumerate(plan.choice)]


def _result(compiled: Compiled, chosen: _Tried | None, bound, verdict, attempts, runtime_s) -> Result:
    inst = compiled.instance
    if chosen is None:
        status = verdict or next((a.status for a in attempts if a.status != SolveStatus.ERROR), SolveStatus.ERROR)
        if status.has_solution():  # a backend claimed a solution it could not deliver
            status = SolveStatus.ERROR
        return Result(instance=inst.name, status=status, solver="", runtime_s=runtime_s, attempts=tuple(attempts))
    objective, status = chosen.objective, chosen.outcome.status
    if bound is not None:
        bound = min(bound, objective)
    if status == SolveStatus.OPTIMAL and bound is None:
        bound = objective
    host = {g: tuple(sorted(ms)) for g, ms in sorted(hosting(inst, chosen.schedule).items())}
    return Result(
        instance=inst.name, status=status, solver=chosen.name, objective=objective,
        bound=bound, runtime_s=runtime_s, attempts=tuple(attempts), schedule=tuple(chosen.schedule), hosting=host,
        metrics=metrics(inst, chosen.schedule))
