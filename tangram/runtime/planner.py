"""GPU capacity planner: how many replicas of each reward model, at which parallel degree.

The decision is a pure function of a :class:`PlannerContext` (like Ray Serve's
autoscaling policy): from the recent demand per model it chooses, by an exact
knapsack over the GPU budget, the (replicas, degree) per model that minimises
the predicted time actions spend at the reward models over the planning
horizon, and applies it only when the predicted gain beats the switching
(model load) cost by a margin (Libra's rule).

Prediction, per model with arrival rate ``a`` (actions/s) and mean work ``w``
(seconds on one speed-1 GPU), at degree ``d`` (speedup ``s_d``) with ``r``
replicas: service ``S = w / s_d``, load ``rho = a S / r``, time in system
``S / (1 - rho)``; an overloaded allocation (``rho >= 1``) costs the whole
horizon per action. Switching a model costs its load time for the next action
and for every action arriving during the load: ``load_s * max(1, a * load_s)``.

:class:`PlannedController` is the glue: a controller that re-plans every
``period_s`` from the GPU actions submitted in the last ``window_s`` and
restricts each model's pending actions to the planned degree (replica counts
are advisory: placement stays with the solver, which keeps models resident).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from tangram.model.instance import Action, Instance, Mode, RewardModel
from tangram.runtime.controller import Controller

UNPLANNED = "unplanned-degree"  # a GPU type no GPU has: the mode gets no placement


@dataclass(frozen=True)
class Demand:
    """Recent demand of one model: arrivals per second and mean work per action (speed-1 GPU seconds)."""

    rate: float
    work_s: float


@dataclass(frozen=True)
class PlannerContext:
    """Everything the planner decides from."""

    demand: Mapping[str, Demand]
    current: Mapping[str, tuple[int, int]]  # model -> (replicas, degree) in force; absent: none
    models: Mapping[str, RewardModel]
    num_gpus: int
    horizon_s: float = 60.0
    margin: float = 1.0  # the gain must exceed margin x switching cost


@dataclass(frozen=True)
class CapacityPlan:
    """The best allocation and whether it is worth switching to."""

    allocation: dict[str, tuple[int, int]]  # model -> (replicas, degree)
    cost_s: float  # predicted action-seconds at the models over the horizon
    current_cost_s: float
    switch_s: float
    apply: bool
    changed: tuple[str, ...] = field(default=())


def delay_s(d: Demand, replicas: int, degree: int, speedup: float, horizon_s: float) -> float:
    """Predicted action-seconds spent at one model over ``horizon_s`` (see the module docstring)."""
    if d.rate <= 0:
        return 0.0
    arrivals = d.rate * horizon_s
    if replicas <= 0:
        return arrivals * horizon_s
    service = d.work_s / speedup
    rho = d.rate * service / replicas
    if rho >= 1.0:
        return arrivals * horizon_s
    return arrivals * min(service / (1.0 - rho), horizon_s)


def plan_capacity(ctx: PlannerContext) -> CapacityPlan:
    """The allocation minimising predicted delay within ``ctx.num_gpus`` GPUs (exact knapsack)."""
    names = sorted(m for m, d in ctx.demand.items() if d.rate > 0 and m in ctx.models)
    # best[g]: (cost, allocation) using at most g GPUs over the models seen so far
    best: list[tuple[float, dict]] = [(0.0, {})] * (ctx.num_gpus + 1)
    for m in names:
        d, rm = ctx.demand[m], ctx.models[m]
        nxt = []
        for g in range(ctx.num_gpus + 1):
            cand = [(best[g][0] + delay_s(d, 0, 1, 1.0, ctx.horizon_s), best[g][1])]
            for p in rm.parallelism:
                for r in range(1, g // p.gpus + 1):
                    cost = best[g - r * p.gpus][0] + delay_s(d, r, p.gpus, p.speedup, ctx.horizon_s)
                    cand.append((cost, {**best[g - r * p.gpus][1], m: (r, p.gpus)}))
            nxt.append(min(cand, key=lambda c: c[0]))
        best = nxt
    cost, alloc = best[ctx.num_gpus]

    def current_cost() -> float:
        total = 0.0
        for m in names:
            r, deg = ctx.current.get(m, (0, 1))
            speed = next((p.speedup for p in ctx.models[m].parallelism if p.gpus == deg), 1.0)
            total += delay_s(ctx.demand[m], r, deg, speed, ctx.horizon_s)
        return total

    now_cost = current_cost()
    changed = tuple(m for m in names if alloc.get(m) != ctx.current.get(m))
    switch = sum(ctx.models[m].load_s * max(1.0, ctx.demand[m].rate * ctx.models[m].load_s) for m in changed)
    apply = bool(changed) and now_cost - cost > ctx.margin * switch
    return CapacityPlan(alloc, cost, now_cost, switch, apply, changed)


def restrict_degree(action: Action, model: RewardModel, degree: int) -> Action:
    """``action`` with only its ``degree``-GPU mode placeable, mode indices unchanged.

    The other degrees keep their place in the mode list (dispatch maps a mode
    index back through the action's own modes) but ask for a GPU type no GPU has.
    """
    modes = tuple(Mode(duration_s=action.work_s / p.speedup, gpus=p.gpus,
                       gpu_type=None if p.gpus == degree else UNPLANNED) for p in model.parallelism)
    return action.model_copy(update={"work_s": None, "modes": modes})


class PlannedController(Controller):
    """The controller with the capacity planner in the loop.

    Parameters
    ----------
    period_s
        Least time between two plans, seconds.
    window_s
        Demand is measured over the GPU actions submitted in this last window, seconds.
    horizon_s, margin
        See :class:`PlannerContext`.
    """

    def __init__(self, *args, period_s: float = 30.0, window_s: float = 60.0, horizon_s: float = 60.0,
                 margin: float = 1.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.period_s, self.window_s, self.horizon_s, self.margin = period_s, window_s, horizon_s, margin
        self.arrivals: deque[tuple[float, str, float]] = deque()  # (time, model, estimated work s)
        self.plan: dict[str, tuple[int, int]] = {}
        self.planned_at = -float("inf")

    def submit(self, action: Action, payload=None, tool=None):
        job = super().submit(action, payload, tool)
        if job.action.model and job.action.work_s is not None:
            self.arrivals.append((self.clock.now(), job.action.model, job.action.work_s))
        return job

    def context(self, now: float) -> PlannerContext:
        """The planner's view at ``now``: demand over the last window."""
        while self.arrivals and self.arrivals[0][0] < now - self.window_s:
            self.arrivals.popleft()
        span = max(min(self.window_s, now - self.arrivals[0][0]) if self.arrivals else self.window_s, 1.0)
        per: dict[str, list[float]] = {}
        for _, m, w in self.arrivals:
            per.setdefault(m, []).append(w)
        demand = {m: Demand(len(ws) / span, sum(ws) / len(ws)) for m, ws in per.items()}
        return PlannerContext(demand, dict(self.plan), self.models, len(self.fleet.gpus), self.horizon_s,
                              self.margin)

    def snapshot(self, now: float, actions: tuple[Action, ...] | None = None) -> Instance:
        if now - self.planned_at >= self.period_s and self.arrivals:
            self.planned_at = now
            plan = plan_capacity(self.context(now))
            if plan.apply:
                self.plan = plan.allocation
                self.journal.append("plan", now, allocation={m: list(v) for m, v in plan.allocation.items()},
                                    cost_s=plan.cost_s, current_cost_s=plan.current_cost_s, switch_s=plan.switch_s)
        inst = super().snapshot(now, actions)
        if not self.plan:
            return inst
        actions = tuple(restrict_degree(a, self.models[a.model], self.plan[a.model][1])
                        if a.work_s is not None and a.model in self.plan else a for a in inst.actions)
        return inst.model_copy(update={"actions": actions})


def planned_policy(config=None, estimator=None, **planner):
    """The planned controller as a simulator policy (``planner``: PlannedController keywords)."""
    return lambda fleet, executor, clock, journal: PlannedController(
        fleet, executor, clock, config=config, estimator=estimator, journal=journal, **planner)
