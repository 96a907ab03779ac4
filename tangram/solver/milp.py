"""The time-indexed MILP backend (PuLP with HiGHS or CBC).

Binary ``x[i, k, t] = 1`` when action ``i`` runs its option ``k`` from tick ``t``.
Every constraint of :mod:`tangram.model.check` becomes a linear row over these
binaries, which gives the LP relaxation researchers look at and strong bounds on
small instances. The grid grows with horizon x options, so the size is computed
before anything is built and a too large instance is refused at once (a coarser
``tick_s`` shrinks the grid).

Inner shape: :func:`safe_horizon` and :func:`start_windows` size the grid; then
:class:`_Model` adds the variables, one method per constraint family (called in
the order of :meth:`_Model.build`), then the objective with one term per weight.
"""

from __future__ import annotations

import re
import tempfile
import time
import warnings
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pulp

from tangram.model.check import slowdown_weights
from tangram.model.compiled import NONE, Compiled
from tangram.model.schedule import SolveStatus
from tangram.solver.base import Outcome, Plan
from tangram.solver.config import SolveConfig

MAX_VARIABLES = 100_000  # binaries; beyond this PuLP's model building alone takes many seconds
MAX_NONZEROS = 1_000_000  # capacity-row entries, the other way the grid explodes
GAP_REL, GAP_ABS = 1e-7, 1e-6  # stop tolerances: "optimal" is optimal to well below a millisecond
EPS = 1e-9

Key = tuple[str, int]  # ("cores" | "memory" | "gpu" | "quota" | "rate" | "renewable", index)


# ----------------------------------------------------------------------------- sizing


def safe_horizon(c: Compiled) -> int:
    """A tick by which some optimal schedule has ended every action.

    Shift an optimal schedule left one action and one tick at a time while it
    stays feasible; no objective term grows (every term is non-decreasing in the
    ends, resource-seconds and loads do not depend on starts). When no shift is
    possible, action j at start s is blocked at s - 1 by: its release or model
    load (s <= ``base``); a predecessor (s = its end + lag); or a resource at
    tick s - 1, held by an action k that started earlier (s <= start_k +
    max(d_k, W_k), W the rate window) or by a running action (s <= ``base``).
    Following the blockers back gives a chain of distinct actions, so

        end_j <= base + Σ_k max(dmax_k, W_k) + Σ lags.

    Unlike :meth:`Compiled.horizon` this holds with quota rate windows, where a
    call may wait a whole window after its predecessor ended.
    """
    windows = [max((c.quota_rate[o.quota][1] for o in c.options(i) if o.quota != NONE and c.quota_rate[o.quota]),
                   default=0) for i in range(c.num_actions)]
    longest = sum(max(max((o.duration for o in c.options(i)), default=0), w) for i, w in enumerate(windows))
    lags = sum(lag for ps in c.preds for _, lag in ps)
    loads = [int(c.model_load[o.model]) for i in range(c.num_actions) for o in c.options(i) if o.model != NONE]
    held = [b.end for b in c.busy] + [c.quota_rate[b.quota][1] for b in c.busy
                                      if b.quota != NONE and c.quota_rate[b.quota]]
    base = max([0, *loads, *held, *(int(r) for r in c.release)])
    return base + longest + lags


def start_windows(c: Compiled, horizon: int) -> list[list[tuple[int, int]]]:
    """Feasible start ticks ``(lo, hi)`` per action and option (``hi < lo``: none).

    ``lo`` is the release, raised by the model load where the option's GPUs do
    not hold the model at ``now_s`` and by the longest chain of predecessors
    (shortest durations plus lags: implied by the precedence rows); ``hi`` lets
    the option end by the deadline and the horizon.
    """
    head = c.release.astype(np.int64).copy()
    for j in c.priority_order():
        for i, lag in c.preds[j]:
            head[j] = max(head[j], head[i] + c.min_duration(i) + lag)
    residency = c.instance.constraints.model_residency
    out = []
    for i in range(c.num_actions):
        end = horizon if c.deadline[i] == NONE else min(horizon, int(c.deadline[i]))
        rows = []
        for o in c.options(i):
            lo = int(head[i])
            if residency and o.model != NONE and not all(c.resident[o.model, g] for g in o.gpus):
                lo = max(lo, int(c.model_load[o.model]))
            rows.append((lo, end - o.duration))
        out.append(rows)
    return out


# ----------------------------------------------------------------------------- resources


def _demands(c: Compiled, item, hold: int) -> Iterator[tuple[Key, float, int]]:
    """(resource, units, ticks held from the start) of an option or a running action.

    Everything is held for ``hold`` ticks except a rate token, held one window.
    """
    if item.node != NONE:
        if item.cores:
            yield ("cores", item.node), item.cores, hold
        if item.memory_gb and c.instance.nodes[item.node].memory_gb > 0:  # the checker caps only these
            yield ("memory", item.node), item.memory_gb, hold
    for g in item.gpus:
        yield ("gpu", g), 1, hold
    if item.quota != NONE:
        yield ("quota", item.quota), 1, hold
        if c.quota_rate[item.quota]:
            yield ("rate", item.quota), 1, c.quota_rate[item.quota][1]
    for r, units in item.renewable:
        yield ("renewable", r), units, hold


def _capacity(c: Compiled, key: Key) -> float:
    kind, k = key
    return {"cores": lambda: c.node_cores[k], "memory": lambda: c.node_memory[k], "gpu": lambda: 1,
            "quota": lambda: c.quota_concurrency[k], "rate": lambda: c.quota_rate[k][0],
            "renewable": lambda: c.renewable_capacity[k]}[kind]()


class _Grid:
    """Which capacity rows are needed and how large the model is, before building it.

    A row at tick τ is dropped when the running actions plus the largest demand
    every action could put there fit the capacity: it can never bind.
    """

    def __init__(self, c: Compiled, windows: list[list[tuple[int, int]]], horizon: int) -> None:
        self.c, self.windows, self.horizon = c, windows, horizon
        self.variables = sum(max(0, hi - lo + 1) for rows in windows for lo, hi in rows)
        terms: dict[Key, list[tuple[int, int, float, int]]] = defaultdict(list)
        for i, rows in enumerate(windows):
            for k, (o, (lo, hi)) in enumerate(zip(c.options(i), rows, strict=True)):
                if hi >= lo:
                    for key, units, hold in _demands(c, o, o.duration):
                        if hold > 0:
                            terms[key].append((i, k, units, hold))
        self.span = horizon + max([1] + [h for ts in terms.values() for *_, h in ts])
        busy: dict[Key, np.ndarray] = defaultdict(lambda: np.zeros(self.span + 1))
        for b in c.busy:
            for key, units, hold in _demands(c, b, b.end):
                busy[key][:min(hold, self.span)] += units
        self.terms, self.busy = terms, busy
        self.overloaded = [key for key, level in busy.items() if level.max() > _capacity(c, key) + EPS]
        self.active = {key: self._active(key, ts) for key, ts in terms.items()}
        self.nonzeros = sum(self._entries(key, ts) for key, ts in terms.items())

    def _active(self, key: Key, terms) -> np.ndarray:
        potential = np.zeros(self.span + 1)
        peak: dict[int, tuple[int, int, float]] = {}  # action -> (first tick, last tick, max units)
        for i, k, units, hold in terms:
            lo, hi = self.windows[i][k]
            a, b, u = peak.get(i, (lo, hi + hold, 0.0))
            peak[i] = (min(a, lo), max(b, hi + hold), max(u, units))
        for a, b, u in peak.values():
            potential[a] += u
            potential[b] -= u
        level = np.cumsum(potential)[:self.span] + self.busy[key][:self.span]
        return np.flatnonzero(level > _capacity(self.c, key) + EPS)

    def _entries(self, key: Key, terms) -> int:
        mark = np.zeros(self.span + 1, dtype=np.int64)
        mark[self.active[key]] = 1
        prefix = np.concatenate(([0], np.cumsum(mark)))
        total = 0
        for i, k, _, hold in terms:
            lo, hi = self.windows[i][k]
            t = np.arange(lo, hi + 1)
            total += int((prefix[np.minimum(t + hold, self.span + 1)] - prefix[t]).sum())
        return total


# ----------------------------------------------------------------------------- model


class _Model:
    """The PuLP problem: variables, constraint families, objective."""

    def __init__(self, grid: _Grid) -> None:
        self.grid, self.c = grid, grid.c
        self.lp = pulp.LpProblem("tangram", pulp.LpMinimize)
        self.x: list[list[list[pulp.LpVariable]]] = []  # [action][option][t - lo]
        self.host: dict[tuple[int, int], pulp.LpVariable] = {}
        self.makespan: pulp.LpVariable | None = None
        self.fairness: pulp.LpVariable | None = None
        self.offset = 0.0  # seconds: the constant part of the objective, kept out of the solver

    def build(self) -> None:
        self._variables()
        # Constraint families, in this order:
        self._one_start()  # exactly one (option, start) per action; releases/deadlines are the windows
        self._capacity()  # cores, memory, GPUs, quota concurrency and rate, renewables, minus running
        self._residency()  # hosting binaries, GPU memory
        self._precedence()  # successor starts after predecessor end + lag
        self._objective()

    # ------------------------------------------------------------------ variables

    def _variables(self) -> None:
        c, n = self.c, 0
        for i, rows in enumerate(self.grid.windows):
            per_option = []
            for k, (lo, hi) in enumerate(rows):
                per_option.append([self._var(f"x_{i}_{k}_{t}", pulp.LpBinary) for t in range(lo, hi + 1)])
                n += max(0, hi - lo + 1)
            self.x.append(per_option)
        inst = c.instance
        if inst.constraints.model_residency or inst.objective.model_load:
            pinned = c.pinned_hosting()
            pairs = {(o.model, g) for i in range(c.num_actions) for o in c.options(i) if o.model != NONE
                     for g in o.gpus} - pinned
            self.host = {(m, g): self._var(f"host_{m}_{g}", pulp.LpBinary) for m, g in sorted(pairs)}

    def _starts(self, i: int) -> Iterator[tuple[int, int, pulp.LpVariable]]:
        """(option, start tick, binary) of action i."""
        for k, (lo, _) in enumerate(self.grid.windows[i]):
            for t, var in enumerate(self.x[i][k], start=lo):
                yield k, t, var

    def _end(self, i: int) -> Iterator[tuple[pulp.LpVariable, int]]:
        """End tick of action i as (binary, coefficient) terms: Σ (t + d_k)·x."""
        opts = self.c.options(i)
        return ((var, t + opts[k].duration) for k, t, var in self._starts(i))

    def _var(self, name: str, cat: str = pulp.LpContinuous, low: float | None = None) -> pulp.LpVariable:
        """A variable attached to the problem (PuLP >= 3.3 deprecates free-standing ones)."""
        if hasattr(self.lp, "add_variable"):
            return self.lp.add_variable(name, lowBound=low, cat=cat)
        return pulp.LpVariable(name, lowBound=low, cat=cat)

    def _add(self, terms, sense: int, rhs: float, name: str) -> None:
        self.lp.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(list(terms)), sense, name, rhs))

    # ------------------------------------------------------------------ constraints

    def _one_start(self) -> None:
        """Σ_{k,t} x[i,k,t] = 1 for every action i.

        Releases, model loads and deadlines need no rows: they bound the start
        windows (:func:`start_windows`).
        """
        for i in range(self.c.num_actions):
            self._add(((var, 1) for _, _, var in self._starts(i)), pulp.LpConstraintEQ, 1, f"one_{i}")

    def _capacity(self) -> None:
        """For every resource r and tick τ where it can bind:

            Σ_{i,k,t : t <= τ < t + h_k} u_{k,r}·x[i,k,t] <= cap_r − busy_r(τ)

        with h_k the option's duration (a rate token: one window) and busy_r the
        running actions' occupancy from tick 0 to their end.
        """
        g = self.grid
        for key, terms in g.terms.items():
            ticks = g.active[key]
            if not len(ticks):
                continue
            rows: dict[int, list[tuple[pulp.LpVariable, float]]] = defaultdict(list)
            tick_list = ticks.tolist()
            for i, k, units, hold in terms:
                lo, _ = g.windows[i][k]
                for t, var in enumerate(self.x[i][k], start=lo):
                    for tau in tick_list[bisect_left(tick_list, t):bisect_left(tick_list, t + hold)]:
                        rows[tau].append((var, units))
            cap = float(_capacity(self.c, key))
            for tau, row in rows.items():
                self._add(row, pulp.LpConstraintLE, cap - float(g.busy[key][tau]), f"{key[0]}_{key[1]}_{tau}")

    def _residency(self) -> None:
        """Models hosted per GPU and their memory (only with model residency on,
        or when the objective pays for loads):

            Σ_{k uses g, t} x[i,k,t] <= host[m,g]     every action i of model m, GPU g
            Σ_m mem_m·host[m,g] <= mem_g − pinned_g   every GPU g (residency on)

        Pinned pairs (running actions) are hosted anyway and need no binary. The
        load before a non-resident model's first action bounds the start windows.
        """
        c = self.c
        if not self.host:
            return
        for i in range(c.num_actions):
            use: dict[tuple[int, int], list] = defaultdict(list)
            for k, _, var in self._starts(i):
                o = c.options(i)[k]
                for gpu in o.gpus:
                    if (o.model, gpu) in self.host:
                        use[(o.model, gpu)].append((var, 1))
            for (m, gpu), terms in use.items():
                self._add([*terms, (self.host[(m, gpu)], -1)], pulp.LpConstraintLE, 0, f"uses_{i}_{m}_{gpu}")
        if not c.instance.constraints.model_residency:
            return
        pinned: dict[int, float] = defaultdict(float)
        for m, gpu in c.pinned_hosting():
            pinned[gpu] += float(c.model_memory[m])
        on_gpu: dict[int, list] = defaultdict(list)
        for (m, gpu), var in self.host.items():
            on_gpu[gpu].append((var, float(c.model_memory[m])))
        for gpu, terms in on_gpu.items():
            free = float(c.gpu_memory[gpu]) - pinned[gpu]
            if sum(mem for _, mem in terms) > free + EPS:
                self._add(terms, pulp.LpConstraintLE, free, f"gpu_memory_{gpu}")

    def _precedence(self) -> None:
        """Σ t·x[j] − Σ (t + d)·x[i] >= lag for every predecessor i of j."""
        for j, preds in enumerate(self.c.preds):
            for i, lag in preds:
                starts = [(var, t) for _, t, var in self._starts(j)]
                ends = [(var, -e) for var, e in self._end(i)]
                self._add(starts + ends, pulp.LpConstraintGE, lag, f"after_{i}_{j}")

    # ------------------------------------------------------------------ objective

    def _objective(self) -> None:
        """The objective of :func:`tangram.model.check.evaluate`, in seconds.

        With τ the tick length and end_i = now + τ·Σ (t + d)·x[i]:

        - weighted ACT: Σ_i w_i·(end_i − release_i)
        - makespan: τ·M, M >= Σ (t + d)·x[i] for every i, M >= 0
        - model load: Σ load_m·host[m,g] over pairs not resident at now (+ pinned ones)
        - resource-seconds: Σ τ·d_k·(cores_k + gpu_core_equivalent·gpus_k)·x[i,k,t]
        - fairness: F >= mean over the task's actions of (end_i − release_i)/shortest_i
        """
        c, inst, obj, tick = self.c, self.c.instance, self.c.instance.objective, self.c.tick_s
        terms: list[tuple[pulp.LpVariable, float]] = []
        if obj.weighted_act:
            for i, a in enumerate(inst.actions):
                w = obj.weighted_act * a.weight
                terms += [(var, w * tick * e) for var, e in self._end(i)]
                self.offset += w * (inst.now_s - a.release_s)
        if obj.makespan and c.num_actions:
            self.makespan = self._var("makespan", low=0)
            for i in range(c.num_actions):
                self._add([(self.makespan, 1), *((v, -e) for v, e in self._end(i))], pulp.LpConstraintGE, 0,
                          f"makespan_{i}")
            terms.append((self.makespan, obj.makespan * tick))
        if obj.model_load:
            load = [m.load_s for m in inst.models]
            terms += [(var, obj.model_load * load[m]) for (m, g), var in self.host.items() if not c.resident[m, g]]
            self.offset += obj.model_load * sum(load[m] for m, g in c.pinned_hosting() if not c.resident[m, g])
        if obj.resource_seconds:
            for i in range(c.num_actions):
                opts = c.options(i)
                terms += [(var, obj.resource_seconds * tick * opts[k].duration
                           * (opts[k].cores + obj.gpu_core_equivalent * len(opts[k].gpus)))
                          for k, _, var in self._starts(i)]
        if obj.fairness and c.num_actions:
            self.fairness = self._var("fairness")
            for task, members in slowdown_weights(inst).items():
                row, const = [(self.fairness, 1.0)], 0.0
                for i, scale in members:
                    row += [(var, -scale * tick * e) for var, e in self._end(i)]
                    const += scale * (inst.now_s - inst.actions[i].release_s)
                self._add(row, pulp.LpConstraintGE, const, f"fairness_{task}")
            terms.append((self.fairness, obj.fairness))
        coef: dict[pulp.LpVariable, float] = defaultdict(float)  # terms share binaries: sum, never overwrite
        for var, value in terms:
            coef[var] += value
        self.lp.setObjective(pulp.LpAffineExpression(list(coef.items())))

    # ------------------------------------------------------------------ plans

    def warm_start(self, plan: Plan) -> bool:
        """Set every variable to the plan's value; False where the plan is off the grid."""
        c = self.c
        values: dict[pulp.LpVariable, float] = {var: 0.0 for i in range(c.num_actions) for _, _, var in self._starts(i)}
        values.update({var: 0.0 for var in self.host.values()})
        ends = []
        for i, (k, start) in enumerate(plan.choice):
            lo, hi = self.grid.windows[i][k] if k < len(self.grid.windows[i]) else (0, -1)
            if not lo <= start <= hi:
                return False
            values[self.x[i][k][start - lo]] = 1.0
            o = c.options(i)[k]
            ends.append(start + o.duration)
            for g in o.gpus:
                if (o.model, g) in self.host:
                    values[self.host[(o.model, g)]] = 1.0
        if self.makespan is not None:
            values[self.makespan] = float(max(ends))
        if self.fairness is not None:
            values[self.fairness] = float(max(self._task_slowdowns(ends)))
        for var, value in values.items():
            var.setInitialValue(value)
        return True

    def _task_slowdowns(self, ends: list[int]) -> list[float]:
        inst, c = self.c.instance, self.c
        return [sum(w * (c.seconds_at(ends[i]) - inst.actions[i].release_s) for i, w in members)
                for members in slowdown_weights(inst).values()] or [0.0]

    def plan(self) -> Plan | None:
        """The solver's chosen (option, start) per action; None if it left one unchosen."""
        choice = []
        for i in range(self.c.num_actions):
            chosen = [(k, t) for k, t, var in self._starts(i) if (var.varValue or 0.0) > 0.5]
            if len(chosen) != 1:
                return None
            choice.append(chosen[0])
        return Plan(choice)


# ----------------------------------------------------------------------------- solvers


class _HiGHS(pulp.HiGHS):
    """PuLP's HiGHS interface with the model passed in bulk (PuLP's per-column
    calls took seconds on 10^4 binaries), a MIP start, and no crash when nothing
    was found."""

    warm = False

    def buildSolverModel(self, lp) -> None:
        import highspy

        inf, h = highspy.kHighsInf, lp.solverModel
        variables = lp.variables()
        for k, var in enumerate(variables):
            var.index = k
        sign = -1.0 if lp.sense == pulp.LpMaximize else 1.0
        h.addCols(len(variables), np.array([sign * lp.objective.get(v, 0.0) for v in variables], dtype=float),
                  np.array([-inf if v.lowBound is None else v.lowBound for v in variables], dtype=float),
                  np.array([inf if v.upBound is None else v.upBound for v in variables], dtype=float),
                  0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        integer = np.array([v.index for v in variables if v.cat == pulp.LpInteger], dtype=np.int32)
        if self.mip and len(integer):
            h.changeColsIntegrality(len(integer), integer,
                                    np.full(len(integer), int(highspy.HighsVarType.kInteger), dtype=np.uint8))
        lower, upper, starts, index, value = [], [], [], [], []
        for k, con in enumerate(lp._constraints.values()):
            con.index = k
            lb, ub = con.getLb(), con.getUb()
            lower.append(-inf if lb is None else lb)
            upper.append(inf if ub is None else ub)
            starts.append(len(index))
            for var, coef in con.items():
                if coef:
                    index.append(var.index)
                    value.append(coef)
        h.addRows(len(lower), np.array(lower, dtype=float), np.array(upper, dtype=float), len(index),
                  np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32), np.array(value, dtype=float))

    def callSolver(self, lp) -> None:
        if self.warm:
            import highspy

            sol = highspy.HighsSolution()
            values = [0.0] * lp.solverModel.getNumCol()
            for var in lp.variables():
                values[var.index] = var.varValue or 0.0
            sol.col_value = values
            sol.value_valid = True
            lp.solverModel.setSolution(sol)
        super().callSolver(lp)

    def findSolutionValues(self, lp):
        if lp.solverModel.getInfo().primal_solution_status != 2:  # 2: feasible
            return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
        return super().findSolutionValues(lp)


def _cbc(**kw) -> pulp.PULP_CBC_CMD:
    """The CBC binary bundled with PuLP (deprecated there in favour of an installed one)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**kw)


def highs_available() -> bool:
    return bool(pulp.HiGHS().available())


class MilpBackend:
    """Time-indexed MILP over PuLP; HiGHS (``milp_solver="highs"``) or CBC.

    Parameters
    ----------
    max_variables, max_nonzeros
        Size limits of the grid; a larger instance is refused with ERROR (so the
        fallback chain goes on) and a message suggesting cpsat or a coarser tick.
    """

    name = "milp"
    exact = True

    def __init__(self, max_variables: int = MAX_VARIABLES, max_nonzeros: int = MAX_NONZEROS) -> None:
        self.max_variables, self.max_nonzeros = max_variables, max_nonzeros

    def is_installed(self) -> bool:
        return bool(_cbc(msg=False).available()) or highs_available()

    def solve(self, compiled: Compiled, config: SolveConfig, initial: Plan | None = None) -> Outcome:
        t0 = time.perf_counter()
        c = compiled
        if c.num_actions == 0:
            return Outcome(SolveStatus.OPTIMAL, Plan([]), message="no pending action")
        horizon = safe_horizon(c)
        windows = start_windows(c, horizon)
        stats: dict = {"horizon": horizon}
        for i, rows in enumerate(windows):
            if all(hi < lo for lo, hi in rows):
                return Outcome(SolveStatus.INFEASIBLE, message=f"{c.action_ids[i]}: no option fits between its "
                               "release (and model load, predecessors) and its deadline", stats=stats)
        grid = _Grid(c, windows, horizon)
        stats.update(variables=grid.variables, nonzeros=grid.nonzeros)
        too_large = self._too_large(grid, c.tick_s)
        if too_large:
            return Outcome(SolveStatus.ERROR, message=too_large, stats=stats)
        if grid.overloaded:
            kind, k = grid.overloaded[0]
            return Outcome(SolveStatus.INFEASIBLE, message=f"running actions alone exceed the {kind} capacity "
                           f"of resource {k}", stats=stats)
        model = _Model(grid)
        model.build()
        stats.update(constraints=model.lp.numConstraints(), build_s=time.perf_counter() - t0)
        notes = []
        use_highs = config.milp_solver == "highs" and highs_available()
        if config.milp_solver == "highs" and not use_highs:
            notes.append("HiGHS unavailable (highspy not installed); solved with CBC")
        warm = initial is not None and model.warm_start(initial)
        if initial is not None and not warm:
            notes.append("initial plan lies outside the time grid; solved cold")
        budget = max(config.time_limit_s - (time.perf_counter() - t0), 0.1)
        t1 = time.perf_counter()
        status, bound, note = (_solve_highs if use_highs else _solve_cbc)(model, config, budget, warm)
        notes += [note] if note else []
        stats.update(solver="highs" if use_highs else "cbc", solve_s=time.perf_counter() - t1, warm_start=warm)
        plan = model.plan() if status.has_solution() else None
        if status.has_solution() and plan is None:
            return Outcome(SolveStatus.ERROR, message="solver reported a solution without a start per action",
                           stats=stats)
        if plan is not None:
            stats["objective"] = pulp.value(model.lp.objective) + model.offset
        if bound is not None:
            bound += model.offset
        if status == SolveStatus.OPTIMAL and bound is None:
            bound = stats["objective"]
        return Outcome(status, plan, bound=bound, message="; ".join(notes), stats=stats)

    def _too_large(self, grid: _Grid, tick_s: float) -> str:
        for what, n, limit in (("variables", grid.variables, self.max_variables),
                               ("nonzeros", grid.nonzeros, self.max_nonzeros)):
            if n > limit:
                return (f"instance too large for the time-indexed MILP: {n} {what} > {limit} "
                        f"({grid.horizon} ticks of {tick_s:g} s); use cpsat, or a coarser tick_s")
        return ""


def _threads(config: SolveConfig) -> int | None:
    return 1 if config.deterministic else (config.num_workers or None)


def _solve_highs(model: _Model, config: SolveConfig, budget: float, warm: bool):
    """Run HiGHS; read its model status and MIP dual bound directly."""
    import highspy

    solver = _HiGHS(msg=config.log, timeLimit=budget, threads=_threads(config), gapRel=GAP_REL, gapAbs=GAP_ABS,
                    random_seed=config.seed, presolve="off")
    solver.warm = warm
    model.lp.solve(solver)
    h, st = model.lp.solverModel, highspy.HighsModelStatus
    info = h.getInfo()
    found = info.primal_solution_status == 2
    code = h.getModelStatus()
    # kUnboundedOrInfeasible: the objective is bounded below (binaries, M >= 0,
    # F >= a mean of non-negative slowdowns), so it can only be infeasible.
    if code == st.kOptimal:
        status = SolveStatus.OPTIMAL
    elif code in (st.kInfeasible, st.kUnboundedOrInfeasible):
        status = SolveStatus.INFEASIBLE
    elif code in (st.kTimeLimit, st.kInterrupt, st.kIterationLimit, st.kSolutionLimit, st.kObjectiveBound,
                  st.kObjectiveTarget):
        status = SolveStatus.FEASIBLE if found else SolveStatus.NO_SOLUTION_IN_TIME
    else:
        status = SolveStatus.ERROR
    bound = info.mip_dual_bound if np.isfinite(info.mip_dual_bound) and status != SolveStatus.INFEASIBLE else None
    return status, bound, ""


def _solve_cbc(model: _Model, config: SolveConfig, budget: float, warm: bool):
    """Run the bundled CBC; statuses from PuLP, the bound from CBC's own log.

    CBC 2.10 can crash when it stops on time while holding a MIP start; the
    start then goes without preprocessing, and a crash anyway is retried cold.
    """
    t0 = time.perf_counter()
    try:
        return (*_run_cbc(model, config, budget, warm), "")
    except pulp.PulpSolverError:
        if not warm:
            raise
    budget = max(budget - (time.perf_counter() - t0), 0.1)
    return (*_run_cbc(model, config, budget, False), "CBC crashed with the MIP start; solved cold")


def _run_cbc(model: _Model, config: SolveConfig, budget: float, warm: bool):
    options = [f"randomCbcSeed {config.seed}"] + (["preprocess off"] if warm else [])
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cbc.log"
        solver = _cbc(msg=False, timeLimit=budget, threads=_threads(config), gapRel=GAP_REL, gapAbs=GAP_ABS,
                      warmStart=warm, logPath=str(log), options=options)
        model.lp.solve(solver)
        text = log.read_text() if log.exists() else ""
    if config.log:
        print(text)
    sol = model.lp.sol_status
    if sol == pulp.LpSolutionOptimal:
        status = SolveStatus.OPTIMAL
    elif sol == pulp.LpSolutionIntegerFeasible:
        status = SolveStatus.FEASIBLE
    elif sol == pulp.LpSolutionInfeasible or model.lp.status == pulp.LpStatusInfeasible:
        status = SolveStatus.INFEASIBLE
    elif sol == pulp.LpSolutionNoSolutionFound and "Stopped on time" in text:
        status = SolveStatus.NO_SOLUTION_IN_TIME
    else:
        status = SolveStatus.ERROR
    # The root LP relaxation is a proven bound. CBC's final "Lower bound" is not
    # trusted: interrupted mid-cut-loop it has printed the incumbent itself.
    found = re.search(r"Continuous objective value is\s+(\S+)", text)
    bound = float(found.group(1)) if found and status in (SolveStatus.FEASIBLE, SolveStatus.NO_SOLUTION_IN_TIME) else None
    return status, bound  # OPTIMAL: the caller's bound is the objective, proven within the gap
