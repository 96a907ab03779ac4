"""The Ray executor: the controller's :class:`~tangram.runtime.controller.Executor` on real pools.

``launch(job, assignment)`` sends the action to the actor its placement names
and returns at once; a waiter thread (``ray.wait`` on the object refs) turns
every finished call into an :class:`~tangram.runtime.controller.ActionOutcome`
and reports it (``on_complete(action_id, outcome)``, or onto ``completions``).
Nothing is lost: an actor that dies mid-action gets the action retried on
another actor of its kind (at most ``max_retries`` times), after which the
action completes as ``failed``; any other error completes it as ``failed`` too.

Payloads by action kind:

- ``cpu``: a :class:`~tangram.runtime.sandbox.Command` as a dict (``argv``,
  ``code``, ``files``, ``stdin``, ``env``, ``limits``) or a string of Python code.
  It runs in the sandbox of the action's ``sandbox`` (else its trajectory; else
  a one-off sandbox removed afterwards) on the placement's node and core count.
- ``gpu``: ``{"requests": [...]}`` (or the list itself), scored by the action's
  model on the placement's GPUs; a degree-k placement splits the batch across
  its k workers, each of which hosts the model.
- ``api``: ``{"call": name, "args": {...}}`` run through the placement's quota gate.

``on_complete`` runs on the waiter thread: the caller serialises it with its
other controller calls (the controller is single-threaded).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

from tangram.model.schedule import Assignment
from tangram.runtime.controller import ActionOutcome, Job
from tangram.runtime.models import names as plugin_names
from tangram.runtime.ray.cluster import Pools
from tangram.runtime.ray.gpu import ModelSpec

log = logging.getLogger(__name__)

LOST = (ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError)


@dataclass
class _Flight:
    """One launched action: its refs (one per actor) and where they went."""

    job: Job
    assignment: Assignment
    targets: tuple[str, ...]
    refs: list[Any] = field(default_factory=list)
    results: dict[int, Any] = field(default_factory=dict)
    retries: int = 0
    cancelled: bool = False
    queued_at: float = field(default_factory=time.time)


class RayExecutor:
    """Runs assignments on node agents, GPU workers and API gates.

    Parameters
    ----------
    pools
        The actors (:func:`~tangram.runtime.ray.cluster.create_pools`).
    on_complete
        Called as ``on_complete(action_id, outcome)`` from the waiter thread;
        outcomes queue on ``completions`` when None.
    models
        Fleet model id -> how to serve it; a model without a spec is served by the
        plug-in of the same name (memory from ``default_memory_gb``).
    max_retries
        Launches after the first when the actor running an action dies.
    """

    def __init__(self, pools: Pools, on_complete: Callable[[str, ActionOutcome], None] | None = None,
                 models: Mapping[str, ModelSpec] | None = None, max_retries: int = 2, poll_s: float = 0.05,
                 default_memory_gb: float = 1.0) -> None:
        self.pools, self.on_complete, self.max_retries, self.poll_s = pools, on_complete, max_retries, poll_s
        self.models = dict(models or {})
        self.default_memory_gb = default_memory_gb
        self.completions: queue.Queue[tuple[str, ActionOutcome]] = queue.Queue()
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        self._by_ref: dict[Any, tuple[str, int]] = {}  # ref -> (action, shard)
        self._dead: set[str] = set()  # agent / worker ids whose actor died
        self._homes: dict[str, set[str]] = {}  # sandbox -> nodes that hold a copy
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._wait_loop, name="tangram-ray-executor", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ Executor protocol

    def launch(self, job: Job, assignment: Assignment) -> None:
        """Start the action where the assignment places it; never raises for the action's sake."""
        a = job.action
        p = assignment.placement
        targets = (p.node,) if a.kind == "cpu" or p.node else p.gpus if p.gpus else (p.quota or a.quota,)
        flight = _Flight(job, assignment, tuple(t for t in targets if t))
        with self._lock:
            self._flights[a.id] = flight
        try:
            self._submit(flight)
        except Exception as e:  # a bad payload or placement fails the action, visibly
            self._finish(flight, ActionOutcome(status="failed", signals={"error": f"{type(e).__name__}: {e}"}))

    def cancel(self, action_id: str) -> None:
        """Stop a running action; it completes as ``cancelled``."""
        with self._lock:
            flight = self._flights.get(action_id)
            if flight is None:
                return
            flight.cancelled = True
        if flight.job.action.kind == "cpu" and flight.targets:
            self.pools.agents[flight.targets[0]].cancel.remote(action_id)
        else:
            for ref in flight.refs:
                ray.cancel(ref)

    # ------------------------------------------------------------------ sandboxes

    def close_sandbox(self, sandbox_id: str) -> None:
        """Remove a trajectory's sandbox wherever it was used."""
        for node in self._homes.pop(sandbox_id, set()):
            if node not in self._dead:
                self.pools.agents[node].close.remote(sandbox_id)

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(5)

    # ------------------------------------------------------------------ launching

    def _submit(self, flight: _Flight) -> None:
        a, kind = flight.job.action, flight.job.action.kind
        if kind == "cpu" or (kind == "generic" and flight.assignment.placement.node):
            refs = [self._submit_cpu(flight)]
        elif kind == "gpu":
            refs = self._submit_gpu(flight)
        elif kind == "api":
            gate = self.pools.gates[flight.targets[0]]
            refs = [gate.call.remote(a.id, dict(flight.job.payload), flight.queued_at)]
        else:
            raise ValueError(f"executor: no pool runs a {kind!r} action without a node")
        with self._lock:
            flight.refs, flight.results = refs, {}
            for k, ref in enumerate(refs):
                self._by_ref[ref] = (a.id, k)
        self._wake.set()

    def _submit_cpu(self, flight: _Flight) -> Any:
        a, node = flight.job.action, flight.targets[0]
        payload = flight.job.payload
        command = {"code": payload} if isinstance(payload, str) else dict(payload or {})
        sandbox = a.sandbox or a.trajectory or a.id
        self._homes.setdefault(sandbox, set()).add(node)
        cores = max(flight.assignment.placement.cores, 1)
        return self.pools.agents[node].run.remote(a.id, sandbox, command, cores, flight.queued_at)

    def _submit_gpu(self, flight: _Flight) -> list[Any]:
        a, payload = flight.job.action, flight.job.payload
        requests = list(payload if isinstance(payload, list) else (payload or {}).get("requests", []))
        spec = self.models.get(a.model) or ModelSpec(
            plugin=(payload or {}).get("plugin", a.model) if isinstance(payload, dict) else a.model,
            memory_gb=self.default_memory_gb)
        if spec.plugin not in plugin_names():
            raise KeyError(f"executor: model {a.model!r} has no plug-in (known: {', '.join(plugin_names())})")
        k = len(flight.targets)
        shards = [requests[i * len(requests) // k:(i + 1) * len(requests) // k] for i in range(k)]
        return [self.pools.gpus[g].score.remote(a.id, a.model, spec.model_dump(), shard, flight.queued_at)
                for g, shard in zip(flight.targets, shards, strict=True)]

    # ------------------------------------------------------------------ waiting

    def _wait_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                refs = list(self._by_ref)
            if not refs:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.poll_s)
            for ref in ready:
                try:
                    self._settle(ref)
                except Exception:  # the loop must survive anything one action does
                    log.exception("executor: settling a result failed")

    def _settle(self, ref: Any) -> None:
        with self._lock:
            action_id, shard = self._by_ref.pop(ref)
            flight = self._flights.get(action_id)
        if flight is None:
            return
        try:
            value = ray.get(ref)
        except LOST as e:
            self._retry(flight, shard, e)
            return
        except Exception as e:  # task error or cancellation
            status = "cancelled" if flight.cancelled else "failed"
            self._finish(flight, ActionOutcome(status=status, signals={"error": f"{type(e).__name__}: {e}"}))
            return
        flight.results[shard] = value
        if len(flight.results) == len(flight.refs):
            self._finish(flight, outcome(flight.job, [flight.results[k] for k in range(len(flight.refs))],
                                         flight.cancelled, flight.retries))

    def _retry(self, flight: _Flight, shard: int, error: Exception) -> None:
        lost = flight.targets[shard] if shard < len(flight.targets) else "?"
        self._dead.add(lost)
        if flight.cancelled:
            self._finish(flight, ActionOutcome(status="cancelled", signals={"error": "actor died"}))
            return
        spare = self._spare(flight)
        if flight.retries >= self.max_retries or spare is None:
            self._finish(flight, ActionOutcome(status="failed", signals={
                "error": f"lost: {type(error).__name__} on {lost}", "retries": flight.retries}))
            return
        log.warning("executor: %s lost on %s; retrying on %s", flight.job.action.id, lost, spare)
        with self._lock:  # forget the other shards of the failed attempt
            for r in flight.refs:
                self._by_ref.pop(r, None)
        flight.retries += 1
        flight.targets = spare
        self._submit(flight)

    def _spare(self, flight: _Flight) -> tuple[str, ...] | None:
        """Live actors of the same kind to retry on (another node first for CPU), or None."""
        kind = flight.job.action.kind
        if kind == "api":
            return None  # one gate per quota: no other actor enforces it
        pool = self.pools.gpus if kind == "gpu" else self.pools.agents
        live = [x for x in pool if x not in self._dead]
        if kind == "gpu":
            k = len(flight.targets)
            return tuple(live[:k]) if len(live) >= k else None
        others = [x for x in live if x not in flight.targets] or live
        return (others[0],) if others else None

    def _finish(self, flight: _Flight, result: ActionOutcome) -> None:
        a = flight.job.action
        with self._lock:
            if self._flights.pop(a.id, None) is None:
                return  # reported already
            for r in flight.refs:
                self._by_ref.pop(r, None)
        if a.kind == "cpu" and not (a.sandbox or a.trajectory):
            self.close_sandbox(a.id)
        if self.on_complete is not None:
            self.on_complete(a.id, result)
        else:
            self.completions.put((a.id, result))


def outcome(job: Job, results: list[dict[str, Any]], cancelled: bool = False, retries: int = 0) -> ActionOutcome:
    """The controller's view of what the actors returned for one action."""
    kind = job.action.kind
    if kind == "gpu":
        scores = [s for r in results for s in r["scores"]]
        return ActionOutcome(
            status="cancelled" if cancelled else "ok",
            duration_s=max(r["score_s"] for r in results), load_s=max(r["load_s"] for r in results),
            signals={"gpus": [r["gpu"] for r in results], "sources": [r["source"] for r in results],
                     "evicted": sorted({m for r in results for m in r["evicted"]}), "retries": retries},
            result={"scores": scores, "per_gpu": results})
    r = results[0]
    if kind == "api":
        status = "cancelled" if cancelled else "ok" if r["error"] is None else "failed"
        return ActionOutcome(status=status, duration_s=r["wall_s"],
                             signals={"quota": r["quota"], "error": r["error"], "retries": retries,
                                      "queued_s": r["started_at"] - r["queued_at"]}, result=r["result"])
    status = {"ok": "ok", "timeout": "timeout"}.get(r["reason"], "failed")
    if cancelled and r["reason"] == "killed":
        status = "cancelled"
    return ActionOutcome(
        status=status, duration_s=r["wall_s"],
        signals={"node": r["node"], "exit_code": r["exit_code"], "reason": r["reason"], "cores": r["cores"],
                 "cpu_s": r["cpu_s"], "queued_s": r["started_at"] - r["queued_at"], "retries": retries},
        result=r)
