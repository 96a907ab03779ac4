"""Simulated pools: an executor that knows the true durations.

The true duration of the chosen mode is the planned (estimated) one scaled by
true base / estimated base, plus the model load when the model is not resident
on the GPUs (LRU eviction under memory pressure, tracked per GPU). It is
revealed only at completion. Every launch is checked against a
:class:`~tangram.runtime.ledger.Ledger`: a policy that over-commits the fleet
fails loudly instead of producing impossible numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tangram.model.instance import Sandbox
from tangram.model.schedule import Assignment
from tangram.runtime.controller import ActionOutcome, Fleet, Job, hold_of
from tangram.runtime.estimator import MIN_BASE_S, base_seconds
from tangram.runtime.ledger import Ledger
from tangram.runtime.residency import Residency
from tangram.runtime.sim.clock import VirtualClock
from tangram.runtime.sim.workload import ActionSpec


class CapacityError(RuntimeError):
    """A policy launched an action onto resources that were not free."""


class SimulatedPools:
    """Executor of the simulator.

    Parameters
    ----------
    fleet
        The resources.
    clock
        The virtual clock.
    at
        ``at(t, action_id)``: the event loop's hook to deliver a completion at time ``t``.
    """

    def __init__(self, fleet: Fleet, clock: VirtualClock, at: Callable[[float, str], None]) -> None:
        self.fleet, self.clock, self.at = fleet, clock, at
        self.models = {m.id: m for m in fleet.models}
        self.ledger = Ledger(fleet)
        self.residency = Residency({g.id: g.memory_gb for g in fleet.gpus}, {m.id: m.memory_gb for m in fleet.models})
        self.specs: dict[str, ActionSpec] = {}
        self.outcomes: dict[str, ActionOutcome] = {}  # launched, outcome revealed at completion
        self.on_gpu: dict[str, str] = {}  # running action -> model, for eviction pinning
        self.gpus_of: dict[str, tuple[str, ...]] = {}
        self.busy_s = 0.0  # Σ true execution seconds

    def expect(self, action_id: str, spec: ActionSpec) -> None:
        """Register the truth of an action before its policy sees it."""
        self.specs[action_id] = spec

    def open_sandbox(self, sandbox: Sandbox | None) -> None:
        if sandbox is not None:
            self.ledger.reserve(sandbox)

    def close_sandbox(self, sandbox: Sandbox | None) -> None:
        if sandbox is not None:
            self.ledger.reserve(sandbox, sign=-1)

    # ------------------------------------------------------------------ executor

    def launch(self, job: Job, assignment: Assignment) -> None:
        a, now = job.action, self.clock.now()
        hold = hold_of(a, assignment.mode, assignment, self.models)
        why = self.ledger.why_not(hold, now)
        if why is not None:
            raise CapacityError(f"{a.id}: launched at {now:g}s onto busy {why}")
        self.ledger.acquire(a.id, hold, now)
        load_s = 0.0
        if a.model:
            for g in hold.gpus:
                pinned = {m for r, m in self.on_gpu.items() if g in self.gpus_of[r]}
                try:
                    loaded, _ = self.residency.use(a.model, g, pinned)
                except MemoryError as exc:
                    raise CapacityError(f"{a.id}: {exc}") from exc
                if loaded:
                    load_s = self.models[a.model].load_s
            self.on_gpu[a.id], self.gpus_of[a.id] = a.model, hold.gpus
        spec = self.specs[a.id]
        planned = assignment.end_s - assignment.start_s
        true_s = planned * spec.true_s / max(base_seconds(a), MIN_BASE_S)
        self.outcomes[a.id] = ActionOutcome(status=spec.status, duration_s=true_s, load_s=load_s,
                                            signals=dict(spec.signals))
        self.at(now + load_s + true_s, a.id)

    def cancel(self, action_id: str) -> None:
        if action_id in self.outcomes:
            self.outcomes[action_id] = ActionOutcome(status="cancelled")
            self.at(self.clock.now(), action_id)

    def finish(self, action_id: str) -> ActionOutcome | None:
        """The outcome of a completion event; None for a stale one (the action was cancelled)."""
        outcome = self.outcomes.pop(action_id, None)
        if outcome is None:
            return None
        self.ledger.release(action_id)
        self.on_gpu.pop(action_id, None)
        self.gpus_of.pop(action_id, None)
        self.specs.pop(action_id, None)
        self.busy_s += outcome.duration_s
        return outcome

    def idle(self) -> bool:
        return not self.outcomes

    def stats(self) -> dict[str, Any]:
        return {"busy_s": self.busy_s}
