"""The exact backend: OR-Tools CP-SAT over the compiled form.

Inner shape: :class:`_Variables` (what is decided), :class:`_Constraints` (one
method per constraint family, called in a fixed order by
:meth:`_Constraints.add_all`), :class:`_Objective` (one term per weight, in the
units of :func:`tangram.model.check.evaluate`, constant offsets included), then
:class:`CpSatBackend` sets the parameters, hints the greedy plan, solves and maps
the answer back to a :class:`Plan`.

Every action ``i`` has one start variable shared by its options; option ``k`` is
a fixed-size optional interval ``[start_i, start_i + d_ik)`` with presence
literal ``x_ik``, exactly one present. The chosen option's interval is put on
every resource the option holds.

Large epochs keep the exact model for a window of the most urgent actions and
fix the others at their greedy decision (see :func:`window_of`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from tangram.model.check import slowdown_weights
from tangram.model.compiled import NONE, Compiled, Option
from tangram.model.schedule import SolveStatus
from tangram.solver.base import Outcome, Plan
from tangram.solver.config import SolveConfig

# Automatic window: above this many options per second of budget, the exact model
# keeps only the most urgent actions (see window_of). Measured on mixed epochs of
# 1000 actions with a 1 s budget on two busy cores: ~1500 free options still improve
# on the greedy plan; 2500 and more often end with nothing better than the hint.
OPTIONS_PER_SECOND = 1500

# Memory is in GiB floats; CP-SAT needs integers. Values are scaled by the
# smallest power of ten that makes them all integral, up to this one.
_MAX_MEMORY_SCALE = 10**6


def _cp_model():
    from ortools.sat.python import cp_model  # imported lazily: optional backend

    return cp_model


# ----------------------------------------------------------------------------- window


def window_of(c: Compiled, config: SolveConfig) -> tuple[set[int] | None, str]:
    """The actions the exact model decides, or None for all of them.

    ``config.window = N`` keeps the first N actions of ``Compiled.priority_order``.
    Without it, an automatic window applies when the model would hold more than
    ``OPTIONS_PER_SECOND * config.time_limit_s`` options: the longest prefix of
    the urgency order within that many options (at least one action).
    """
    order = c.priority_order()
    budget = OPTIONS_PER_SECOND * config.time_limit_s
    if config.window is not None:
        if config.window >= c.num_actions:
            return None, ""
        return set(order[: config.window]), f"window of {config.window} actions"
    sizes = [len(c.options(i)) for i in order]
    if sum(sizes) <= budget:
        return None, ""
    keep, total = [], 0
    for i, size in zip(order, sizes, strict=True):
        if keep and total + size > budget:
            break
        keep.append(i)
        total += size
    return set(keep), f"automatic window of {len(keep)} actions ({sum(sizes)} options > {budget:g})"


# ----------------------------------------------------------------------------- helpers


def integer_scale(values) -> int:
    """Smallest power of ten (<= 10**6) that makes every value integral, else 10**6."""
    scale = 1
    while scale < _MAX_MEMORY_SCALE and any(abs(v * scale - round(v * scale)) > 1e-9 for v in values):
        scale *= 10
    return scale


def horizon(c: Compiled, initial: Plan | None) -> int:
    """Latest tick any end may take.

    ``compiled.horizon()`` serialises durations but not rate windows: a call
    holds a rate token for a whole window, so each rate-limited action can push
    the serial schedule back by one window more (plus one for the running calls).
    The hint must fit as well.
    """
    windows = [max((c.quota_rate[o.quota][1] for o in c.options(i) if o.quota != NONE and c.quota_rate[o.quota]),
                   default=0) for i in range(c.num_actions)]
    extra = sum(windows) + max((r[1] for r in c.quota_rate if r), default=0)
    hinted = max((initial.end(c, i) for i in range(c.num_actions)), default=0) if initial else 0
    return max(c.horizon() + extra, hinted)


# ----------------------------------------------------------------------------- variables


@dataclass
class _Choice:
    """One option of one action in the model."""

    k: int  # index into compiled.options(i)
    option: Option
    present: object  # BoolVar (or a constant 1 for a fixed action)
    interval: object


@dataclass
class _Variables:
    """start_i, end_i, the options' presence literals and intervals, and
    host[m, g] = 1 iff model m is placed on GPU g by a present option (or a running action)."""

    starts: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    choices: list[list[_Choice]] = field(default_factory=list)
    hosts: dict[tuple[int, int], object] = field(default_factory=dict)

    @classmethod
    def build(cls, m, c: Compiled, fixed: dict[int, tuple[int, int]], horizon: int, hosting: bool) -> _Variables:
        v = cls()
        for i in range(c.num_actions):
            if i in fixed:  # outside the window: the greedy decision, as constants
                k, start = fixed[i]
                o = c.options(i)[k]
                s = m.new_constant(start)
                v.starts.append(s)
                v.ends.append(m.new_constant(start + o.duration))
                v.choices.append([_Choice(k, o, m.new_constant(1), m.new_fixed_size_interval_var(s, o.duration, ""))])
                continue
            release, deadline = int(c.release[i]), int(c.deadline[i])
            latest = horizon if deadline == NONE else min(horizon, deadline)
            s = m.new_int_var(release, latest, f"start{i}")
            choices = []
            for k, o in enumerate(c.options(i)):
                if release + o.duration > latest:
                    continue  # cannot finish in time: never present
                x = m.new_bool_var(f"x{i}_{k}")
                choices.append(_Choice(k, o, x, m.new_optional_fixed_size_interval_var(s, o.duration, x, "")))
            e = m.new_int_var(release, latest, f"end{i}")
            m.add(e == s + sum(ch.option.duration * ch.present for ch in choices))
            v.starts.append(s)
            v.ends.append(e)
            v.choices.append(choices)
        if hosting:
            pairs = {(ch.option.model, g) for chs in v.choices for ch in chs if ch.option.model != NONE
                     for g in ch.option.gpus} | c.pinned_hosting()
            v.hosts = {pair: m.new_bool_var(f"host{pair[0]}_{pair[1]}") for pair in sorted(pairs)}
        return v


# ----------------------------------------------------------------------------- constraints


class _Constraints:
    """The constraint families, one method each."""

    def __init__(self, m, c: Compiled, v: _Variables) -> None:
        self.m, self.c, self.v = m, c, v
        # Who uses what, built once: resource key -> [(interval, option or busy, action or None)].
        self.users: dict[tuple[str, int], list] = defaultdict(list)
        for i, chs in enumerate(v.choices):
            for ch in chs:
                self._index(ch.interval, ch.option, (i, ch))
        for b in c.busy:
            self._index(m.new_fixed_size_interval_var(0, b.end, ""), b, None)

    def _index(self, interval, o, who) -> None:
        if o.node != NONE:
            self.users[("node", o.node)].append((interval, o, who))
        for g in o.gpus:
            self.users[("gpu", g)].append((interval, o, who))
        if o.quota != NONE:
            self.users[("quota", o.quota)].append((interval, o, who))
        for r, _ in o.renewable:
            self.users[("renewable", r)].append((interval, o, who))

    def add_all(self) -> None:
        """The order is immaterial to CP-SAT; it follows the data model."""
        self.one_option()          # each action runs exactly once
        self.precedence()          # end_i + lag <= start_j
        self.node_capacity()       # cores and memory per CPU node
        self.gpu_exclusive()       # one action per GPU at a time, gangs share one interval
        self.quota_concurrency()   # calls in flight per API quota
        self.quota_rate()          # calls started per window
        self.renewables()          # capacity-only resources
        self.model_residency()     # GPU memory of hosted models, load before first use
        # Releases and deadlines are the domains of start_i and end_i (_Variables.build).

    def _cumulative(self, items, capacity: int) -> None:
        """Σ demand of the intervals in progress <= capacity, skipped when it cannot bind."""
        items = [(iv, d) for iv, d in items if d > 0]
        if sum(d for _, d in items) > capacity:
            self.m.add_cumulative([iv for iv, _ in items], [d for _, d in items], capacity)

    def one_option(self) -> None:
        r"""Σ_k x_ik = 1 for every action i."""
        for chs in self.v.choices:
            self.m.add_exactly_one([ch.present for ch in chs])

    def precedence(self) -> None:
        r"""end_i + lag_ij <= start_j for every predecessor i of j."""
        for j, preds in enumerate(self.c.preds):
            for i, lag in preds:
                self.m.add(self.v.ends[i] + lag <= self.v.starts[j])

    def node_capacity(self) -> None:
        r"""For every node n and tick t: Σ_{present options on n running at t} cores <= cores_n,
        and likewise memory <= memory_n (sandbox memory already subtracted). Running
        actions hold their share on [0, end). Memory is scaled to integers exactly when
        it can be; otherwise demands round up and capacities down (never optimistic)."""
        c = self.c
        for n in range(len(c.node_ids)):
            users = self.users[("node", n)]
            self._cumulative([(iv, o.cores) for iv, o, _ in users], int(c.node_cores[n]))
            if c.memory_checked and math.isfinite(c.node_memory[n]):
                scale = integer_scale([*(o.memory_gb for _, o, _ in users), c.node_memory[n]])
                cap = math.floor(c.node_memory[n] * scale + 1e-9)
                self._cumulative([(iv, math.ceil(o.memory_gb * scale - 1e-9)) for iv, o, _ in users], cap)

    def gpu_exclusive(self) -> None:
        r"""NoOverlap per GPU g over every present option whose block contains g; a
        multi-GPU option puts its one interval on each GPU of its block, so the gang
        starts together (blocks lie inside one NVLink domain when the rule is on)."""
        for g in range(len(self.c.gpu_ids)):
            ivs = [iv for iv, _, _ in self.users[("gpu", g)]]
            if len(ivs) > 1:
                self.m.add_no_overlap(ivs)

    def quota_concurrency(self) -> None:
        r"""For every quota q and tick t: calls of q running at t <= concurrency_q."""
        for q in range(len(self.c.quota_ids)):
            self._cumulative([(iv, 1) for iv, _, _ in self.users[("quota", q)]], int(self.c.quota_concurrency[q]))

    def quota_rate(self) -> None:
        r"""A call holds one token on [start, start + window); tokens in use <= calls_per_window.
        Running calls hold theirs on [0, window)."""
        c = self.c
        for q, rate in enumerate(c.quota_rate):
            if rate is None:
                continue
            calls, window = rate
            items = [
                (self.m.new_fixed_size_interval_var(0, window, "") if who is None  # a running call
                 else self.m.new_optional_fixed_size_interval_var(self.v.starts[who[0]], window, who[1].present, ""), 1)
                for _, _, who in self.users[("quota", q)]]
            self._cumulative(items, calls)

    def renewables(self) -> None:
        r"""For every renewable r and tick t: Σ units in use <= capacity_r."""
        for r in range(len(self.c.renewable_ids)):
            items = [(iv, dict(o.renewable)[r]) for iv, o, _ in self.users[("renewable", r)]]
            self._cumulative(items, int(self.c.renewable_capacity[r]))

    def model_residency(self) -> None:
        r"""host[m, g] = OR of the present options of model m whose block contains g
        (1 for the models running actions keep). When residency applies:
        Σ_m host[m, g]·mem_m <= mem_g, and x_ik with a GPU of its block not resident
        at tick 0 => start_i >= load_m."""
        c, m, v = self.c, self.m, self.v
        if not v.hosts:
            return
        users: dict[tuple[int, int], list] = {pair: [] for pair in v.hosts}
        for g in range(len(c.gpu_ids)):
            for _, o, who in self.users[("gpu", g)]:
                if who is not None and o.model != NONE:
                    users[(o.model, g)].append(who[1].present)
        pinned = c.pinned_hosting()
        for pair, h in v.hosts.items():
            if pair in pinned:
                m.add(h == 1)
                continue
            for x in users[pair]:
                m.add_implication(x, h)
            m.add_bool_or(users[pair]).only_enforce_if(h)
        if not c.instance.constraints.model_residency:
            return
        scale = integer_scale([*c.model_memory, *c.gpu_memory])
        for g in range(len(c.gpu_ids)):
            hosted = [(h, math.ceil(c.model_memory[mm] * scale - 1e-9)) for (mm, gg), h in v.hosts.items() if gg == g]
            cap = math.floor(c.gpu_memory[g] * scale + 1e-9)
            if sum(d for _, d in hosted) > cap:
                m.add(sum(d * h for h, d in hosted) <= cap)
        for i, chs in enumerate(v.choices):
            for ch in chs:
                o = ch.option
                load = int(c.model_load[o.model]) if o.model != NONE else 0
                if o.gpus and load > c.release[i] and not all(c.resident[o.model, g] for g in o.gpus):
                    m.add(v.starts[i] >= load).only_enforce_if(ch.present)


# ----------------------------------------------------------------------------- objective


class _Objective:
    """The weighted sum of :func:`tangram.model.check.evaluate`, one term per weight.

    Each term adds (variable, coefficient) pairs in objective units (seconds) to
    ``terms`` and its constant part to ``offset``. CP-SAT then minimises
    Σ floor(coef / unit)·var over integers, ``unit`` chosen so the largest
    possible activity is about 2**50. Every variable is >= 0, so rounding down
    never raises the value: ``unit·bound + offset`` is a valid lower bound of
    evaluate(), and ``unit·value + offset`` matches evaluate() of a solution to
    within ``unit`` per unit of each variable (relative error ~1e-9 in practice).
    """

    def __init__(self, m, c: Compiled, v: _Variables, horizon: int) -> None:
        self.m, self.c, self.v, self.horizon = m, c, v, horizon
        self.terms: list[tuple[object, float, int]] = []  # (variable, coefficient, upper bound)
        self.offset = 0.0
        self.unit = 1.0
        self.makespan = None
        self.fairness = None
        self.fairness_rows: list[tuple[list[tuple[int, int]], int]] = []  # per task: [(i, int coef)], int const
        self.integer_terms: list[tuple[object, int]] = []

    def build(self) -> None:
        o = self.c.instance.objective
        if o.weighted_act:
            self.weighted_act(o.weighted_act)
        if o.makespan:
            self.makespan_term(o.makespan)
        if o.model_load:
            self.model_load(o.model_load)
        if o.resource_seconds:
            self.resource_seconds(o.resource_seconds, o.gpu_core_equivalent)
        rows = self.fairness_term(o.fairness) if o.fairness else []
        top = sum(coef * ub for _, coef, ub in self.terms) + max(
            [sum(x for x in coef.values()) * self.horizon + max(const, 0.0) for coef, const in rows], default=0.0)
        self.unit = top / 2**50 if top > 0 else 1.0
        self.integer_terms = [(var, math.floor(coef / self.unit)) for var, coef, _ in self.terms]
        if rows:  # F >= row_t for every task, in objective units: F enters with coefficient 1
            self.fairness_rows = [([(i, math.floor(x / self.unit)) for i, x in coef.items()],
                                   math.floor(const / self.unit)) for coef, const in rows]
            bound = max(sum(k for _, k in r) * self.horizon + max(k0, 0) for r, k0 in self.fairness_rows)
            self.fairness = self.m.new_int_var(0, bound, "fairness")
            for row, const in self.fairness_rows:
                self.m.add(self.fairness >= sum(k * self.v.ends[i] for i, k in row) + const)
            self.integer_terms.append((self.fairness, 1))
        self.m.minimize(sum(k * var for var, k in self.integer_terms if k))

    def seconds(self, value: float) -> float:
        """An integer objective value (or bound) in objective units."""
        return float(self.unit * value + self.offset)

    def weighted_act(self, weight: float) -> None:
        r"""w·Σ_i w_i (now + tick·end_i − release_i)."""
        c, inst = self.c, self.c.instance
        for i, a in enumerate(inst.actions):
            self.terms.append((self.v.ends[i], weight * c.weight[i] * c.tick_s, self.horizon))
            self.offset += weight * c.weight[i] * (inst.now_s - a.release_s)

    def makespan_term(self, weight: float) -> None:
        r"""w·tick·M with M = max(0, max_i end_i)."""
        self.makespan = self.m.new_int_var(0, self.horizon, "makespan")
        for e in self.v.ends:
            self.m.add(self.makespan >= e)
        self.terms.append((self.makespan, weight * self.c.tick_s, self.horizon))

    def model_load(self, weight: float) -> None:
        r"""w·Σ_{(m, g) not resident at now} load_m·host[m, g] (seconds, as loaded)."""
        c = self.c
        for (mm, g), h in self.v.hosts.items():
            if not c.resident[mm, g]:
                self.terms.append((h, weight * c.instance.models[mm].load_s, 1))

    def resource_seconds(self, weight: float, gpu_eq: float) -> None:
        r"""w·Σ_ik x_ik·tick·d_ik·(cores_ik + gpu_eq·|gpus_ik|)."""
        for chs in self.v.choices:
            for ch in chs:
                units = ch.option.cores + gpu_eq * len(ch.option.gpus)
                if units:
                    self.terms.append((ch.present, weight * self.c.tick_s * ch.option.duration * units, 1))

    def fairness_term(self, weight: float) -> list[tuple[dict[int, float], float]]:
        r"""w·F, F >= w·mean over the task's actions of (now + tick·end_i − release_i) / sd_i
        for every task (weights from check.slowdown_weights). Returns each task's row:
        ({i: coefficient of end_i}, constant), in objective units."""
        c, inst = self.c, self.c.instance
        rows = []
        for members in slowdown_weights(inst).values():
            rows.append(({i: weight * x * c.tick_s for i, x in members},
                         sum(weight * x * (inst.now_s - inst.actions[i].release_s) for i, x in members)))
        return rows


# ----------------------------------------------------------------------------- backend


_STATUS = {
    "OPTIMAL": SolveStatus.OPTIMAL,
    "FEASIBLE": SolveStatus.FEASIBLE,
    "INFEASIBLE": SolveStatus.INFEASIBLE,
    "MODEL_INVALID": SolveStatus.MODEL_INVALID,
    "UNKNOWN": SolveStatus.NO_SOLUTION_IN_TIME,
}


class CpSatModel:
    """The CP-SAT model of one compiled instance, with the actions in ``fixed``
    pinned to (option index, start tick)."""

    def __init__(self, c: Compiled, fixed: dict[int, tuple[int, int]] | None = None,
                 initial: Plan | None = None) -> None:
        cp_model = _cp_model()
        self.c, self.fixed = c, fixed or {}
        self.model = cp_model.CpModel()
        self.horizon = horizon(c, initial)
        hosting = c.instance.constraints.model_residency or c.instance.objective.model_load > 0
        self.vars = _Variables.build(self.model, c, self.fixed, self.horizon, hosting)
        _Constraints(self.model, c, self.vars).add_all()
        self.objective = _Objective(self.model, c, self.vars, self.horizon)
        self.objective.build()

    @property
    def num_options(self) -> int:
        return sum(len(chs) for chs in self.vars.choices)

    def hint(self, plan: Plan) -> int:
        """Hint every variable with ``plan``; returns the plan's integer model objective."""
        c, v, m = self.c, self.vars, self.model
        value: dict[int, int] = {}

        def put(var, x: int, hint: bool = True) -> None:
            value[var.index] = x
            if hint:  # the fixed actions' variables are constants
                m.add_hint(var, x)

        ends = [plan.end(c, i) for i in range(c.num_actions)]
        for i, (k, start) in enumerate(plan.choice):
            free = i not in self.fixed
            put(v.starts[i], start, free)
            put(v.ends[i], ends[i], free)
            for ch in v.choices[i]:
                put(ch.present, int(ch.k == k), free)
        hosted = {(c.options(i)[k].model, g) for i, (k, _) in enumerate(plan.choice) for g in c.options(i)[k].gpus}
        hosted |= c.pinned_hosting()
        for pair, h in v.hosts.items():
            put(h, int(pair in hosted))
        o = self.objective
        if o.makespan is not None:
            put(o.makespan, max([0, *ends]))
        if o.fairness is not None:
            put(o.fairness, max([0] + [sum(k * ends[i] for i, k in row) + const for row, const in o.fairness_rows]))
        return sum(k * value[var.index] for var, k in o.integer_terms)

    def plan(self, solver) -> Plan:
        """The solver's decision per action."""
        choice = []
        for i, chs in enumerate(self.vars.choices):
            k = next(ch.k for ch in chs if solver.boolean_value(ch.present))
            choice.append((k, int(solver.value(self.vars.starts[i]))))
        return Plan(choice)


def _parameters(solver, config: SolveConfig, windowed: bool) -> None:
    p = solver.parameters
    if windowed:
        # The fixed actions make presolve slow (it ate whole 1 s budgets in our
        # measurements) and buy nothing here: a windowed model reports no bound.
        p.cp_model_presolve = False
    p.random_seed = config.seed
    p.log_search_progress = config.log
    if config.deterministic:
        # Reproducible: one worker and a deterministic budget. The wall-clock limit
        # is only a guard: on two loaded cores one deterministic unit took ~8 s.
        p.num_workers = 1
        p.max_deterministic_time = config.time_limit_s
        p.max_time_in_seconds = 30 + 30 * config.time_limit_s
    else:
        p.max_time_in_seconds = config.time_limit_s
        if config.num_workers:
            p.num_workers = config.num_workers


class CpSatBackend:
    """Exact CP-SAT backend (see the module docstring for the model)."""

    name = "cpsat"
    exact = True

    def is_installed(self) -> bool:
        try:
            _cp_model()
        except ImportError:
            return False
        return True

    def solve(self, compiled: Compiled, config: SolveConfig, initial: Plan | None = None) -> Outcome:
        """Solve within ``config.time_limit_s``; never return a plan worse than ``initial``.

        With a window the plan is at best FEASIBLE and no bound is reported: the
        fixed actions make the model a restriction of the instance.
        """
        t0 = time.perf_counter()
        window, note = window_of(compiled, config)
        if window is not None and initial is None:
            from tangram.solver.greedy import GreedyBackend

            initial = GreedyBackend().solve(compiled, config).plan
            if initial is None:
                window, note = None, f"{note} dropped: no greedy plan to fix the others at"
        fixed = {i: initial.choice[i] for i in range(compiled.num_actions) if i not in window} if window else {}
        model = CpSatModel(compiled, fixed, initial)
        hint_value = model.hint(initial) if initial is not None else None
        build_s = time.perf_counter() - t0

        cp_model = _cp_model()
        solver = cp_model.CpSolver()
        _parameters(solver, config, windowed=bool(fixed))
        code = solver.solve(model.model)
        status = _STATUS.get(solver.status_name(code), SolveStatus.ERROR)
        stats = {
            "num_actions": compiled.num_actions,
            "num_free_actions": compiled.num_actions - len(fixed),
            "num_options": model.num_options,
            "num_booleans": solver.num_booleans,
            "num_branches": solver.num_branches,
            "num_conflicts": solver.num_conflicts,
            "build_s": build_s,
            "wall_s": solver.wall_time,
            "horizon": model.horizon,
            "cpsat_status": solver.status_name(code),
        }
        messages = [note] if note else []
        plan = bound = None
        if status.has_solution():
            value = round(solver.objective_value)
            plan = model.plan(solver)
            if hint_value is not None and value > hint_value:
                plan, value = initial, hint_value  # CP-SAT found nothing as good as its hint in time
                messages.append("kept the hint: better than the solver's solution")
            stats["objective"] = model.objective.seconds(value)
        if status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE, SolveStatus.NO_SOLUTION_IN_TIME) and not fixed \
                and math.isfinite(solver.best_objective_bound):
            bound = model.objective.seconds(solver.best_objective_bound)
        if fixed:
            if status == SolveStatus.OPTIMAL:
                status = SolveStatus.FEASIBLE  # optimal for the window only
            elif status == SolveStatus.INFEASIBLE:
                status = SolveStatus.NO_SOLUTION_IN_TIME  # a restriction proves nothing
                messages.append("windowed model infeasible")
        stats["runtime_s"] = time.perf_counter() - t0
        return Outcome(status, plan=plan, bound=bound, message="; ".join(messages), stats=stats)
