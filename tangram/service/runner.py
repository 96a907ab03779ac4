"""The runner: one policy (the controller or a baseline), its executor, its journal and the epoch loop thread.

Threads and the lock
--------------------
Three threads call the policy: request handlers (submit, cancel, trajectories),
the executor's waiter thread (``complete``) and the epoch thread (``epoch``). The
policy is single-threaded, so every call, and every journal append, happens
under :attr:`Runner.lock` (re-entrant: an executor may report a failed launch
synchronously from inside ``epoch``).

Epochs
------
An epoch is due at the earliest of: the first arrival or completion since the
last epoch, the plan's next planned start (``EpochReport.next_s``) and the
periodic tick; never sooner than ``min_epoch_interval_s`` after the last one when
that one left actions pending (the interval batches arrivals under a backlog; a
service that keeps up plans each arrival at once).
The *epoch lag* is how late an epoch started after it was due: the loop falls
behind when it grows.

Journal and recovery
--------------------
The policy journals ``accepted`` inside ``submit``, which returns before the
request is acknowledged. The runner adds one ``result`` event per finished
action (what the executor returned). A runner started on an existing journal
re-opens the trajectories that were open, restores finished actions with their
results, and re-submits every action accepted and not finished.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tangram.model.instance import Action
from tangram.runtime.controller import ActionOutcome, Clock, EpochReport, Executor, Fleet, PolicyFactory, WallClock
from tangram.runtime.journal import Journal, unfinished
from tangram.service.metrics import Metrics

log = logging.getLogger(__name__)

TERMINAL = frozenset({"ok", "failed", "timeout", "cancelled"})


@dataclass
class Record:
    """What the service knows about one accepted action (times in epoch seconds)."""

    id: str
    kind: str
    task: str
    trajectory: str | None
    submitted_at: float  # the action's release
    state: str = "pending"  # pending, running, or a terminal status
    dispatched_at: float | None = None
    finished_at: float | None = None
    node: str | None = None
    cores: int = 0
    gpus: tuple[str, ...] = ()
    quota: str | None = None
    duration_s: float | None = None
    result: Any = None
    signals: dict[str, Any] = field(default_factory=dict)
    waiters: list = field(default_factory=list, repr=False)  # (event loop, future) of long polls

    @classmethod
    def of(cls, action: Action) -> Record:
        return cls(action.id, action.kind, action.task, action.trajectory, action.release_s)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    @property
    def act_s(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.submitted_at

    def view(self) -> dict[str, Any]:
        """The JSON shape of :class:`tangram.service.app.ActionView`."""
        return {"id": self.id, "kind": self.kind, "task": self.task, "trajectory": self.trajectory,
                "state": self.state, "done": self.done, "submitted_at": self.submitted_at,
                "dispatched_at": self.dispatched_at, "finished_at": self.finished_at, "act_s": self.act_s,
                "node": self.node, "cores": self.cores, "gpus": list(self.gpus), "quota": self.quota,
                "duration_s": self.duration_s, "result": self.result, "signals": self.signals}


class Runner:
    """Drives a policy on a live executor; thread-safe entry points for the HTTP layer.

    Parameters
    ----------
    fleet
        The resources.
    make_executor
        Builds the executor given the completion callback (``on_complete(action_id, outcome)``).
    policy_factory
        Builds the policy from (fleet, executor, clock, journal).
    journal_path
        The JSONL journal; recovered from when it exists. None keeps no file (and recovers nothing).
    tick_s
        Periodic epoch when no event comes, seconds.
    durable
        fsync the journal after every event.
    """

    def __init__(self, fleet: Fleet, make_executor: Callable[[Callable[[str, ActionOutcome], None]], Executor],
                 policy_factory: PolicyFactory, journal_path: str | Path | None = None, tick_s: float = 0.25,
                 durable: bool = False, clock: Clock | None = None, name: str = "tangram") -> None:
        self.fleet, self.tick_s, self.name = fleet, tick_s, name
        self.clock = clock or WallClock()
        self.metrics = Metrics()
        self.lock = threading.RLock()
        self.records: dict[str, Record] = {}
        self.trajectories: set[str] = set()
        path = Path(journal_path) if journal_path is not None else None
        events = list(Journal.read(path)) if path is not None and path.exists() else []
        self.journal = Journal(path, durable=durable)
        self.executor = make_executor(self._on_complete)
        self.policy = policy_factory(fleet, self.executor, self.clock, self.journal)
        self.epochs, self.max_lag_s, self.max_epoch_s = 0, 0.0, 0.0
        self._cv = threading.Condition()
        self._trigger_at: float | None = None
        self._next_s: float | None = None
        self._last_epoch = time.time()
        self._busy = False  # whether the last epoch left a backlog: only then is the minimum interval kept
        self._stop = threading.Event()
        with self.lock:
            self.resumed = self._recover(events)
        self._thread = threading.Thread(target=self._loop, name=f"{name}-epochs", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ requests

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> str | None:
        """Place the trajectory's sandbox; its node (None without CPU nodes)."""
        with self.lock:
            sb = self.policy.open_trajectory(trajectory_id, memory_gb)
            self.trajectories.add(trajectory_id)
        return sb.node if sb is not None else None

    def close_trajectory(self, trajectory_id: str) -> bool:
        """Forget the trajectory and remove its sandbox's files; False if it was not open."""
        with self.lock:
            if trajectory_id not in self.trajectories:
                return False
            self.trajectories.discard(trajectory_id)
            self.policy.close_trajectory(trajectory_id)
        close = getattr(self.executor, "close_sandbox", None)  # the policy does not reach the executor
        if close is not None:
            close(trajectory_id)
        self._poke()  # a baseline may have been waiting for the freed cores
        return True

    def submit(self, action: Action, payload: Any = None, tool: str | None = None) -> Record:
        """Accept one action (journaled when this returns). Its release is its arrival here at the latest.

        Raises ``ValueError`` naming the rule when the action is a duplicate or no resource can run it.
        """
        return self.submit_many([(action, payload, tool)])[0]

    def submit_many(self, items: list[tuple[Action, Any, str | None]]) -> list[Record | ValueError]:
        """Accept several actions under one lock; a rejected one is returned as its ``ValueError``."""
        out: list[Record | ValueError] = []
        now = self.clock.now()
        with self.lock:
            for action, payload, tool in items:
                if action.release_s < now:
                    action = action.model_copy(update={"release_s": now})
                try:
                    out.append(self._accept(action, payload, tool))
                except ValueError as e:
                    out.append(e)
        self._poke()
        return out

    def _accept(self, action: Action, payload: Any, tool: str | None) -> Record:
        if action.id in self.records:
            raise ValueError(f"actions: duplicate id {action.id!r}")
        self.policy.submit(action, payload, tool)  # journals "accepted"
        rec = self.records[action.id] = Record.of(action)
        self.metrics.accepted.labels(action.kind).inc()
        return rec

    def get(self, action_id: str) -> Record:
        """The record of an action; ``KeyError`` when unknown."""
        with self.lock:
            if action_id not in self.records:
                raise KeyError(f"actions: unknown id {action_id!r}")
            return self.records[action_id]

    def cancel(self, action_id: str) -> Record:
        """Cancel a pending action now, or ask the executor to stop a running one."""
        with self.lock:
            rec = self.get(action_id)
            if not rec.done and self.policy.cancel(action_id):
                if rec.state == "pending":
                    self._finish(rec, "cancelled", self.clock.now())
                else:
                    threading.Thread(target=self._keep_cancelling, args=(rec,), daemon=True).start()
        return rec

    def _keep_cancelling(self, rec: Record, every_s: float = 0.2, limit_s: float = 30.0) -> None:
        """Repeat the executor's cancel until the action ends: a stop that reaches a node before
        the action's process exists finds nothing to kill."""
        deadline = time.time() + limit_s
        while not rec.done and time.time() < deadline:
            time.sleep(every_s)
            if not rec.done:
                self.executor.cancel(rec.id)

    async def wait(self, action_id: str, timeout_s: float) -> Record:
        """The record once the action is done, or as it is after ``timeout_s`` seconds."""
        loop = asyncio.get_running_loop()
        with self.lock:
            rec = self.get(action_id)
            if rec.done:
                return rec
            entry = (loop, loop.create_future())
            rec.waiters.append(entry)
        try:
            await asyncio.wait_for(entry[1], timeout_s)
        except TimeoutError:
            pass
        finally:
            with self.lock:
                if entry in rec.waiters:
                    rec.waiters.remove(entry)
        return rec

    def list(self, state: str | None = None, kind: str | None = None, task: str | None = None,
             trajectory: str | None = None, limit: int = 1000, offset: int = 0) -> list[Record]:
        """Records in submission order, filtered (``state`` may also be ``done``)."""
        with self.lock:
            recs = [r for r in self.records.values()
                    if (state is None or r.state == state or (state == "done" and r.done))
                    and (kind is None or r.kind == kind) and (task is None or r.task == task)
                    and (trajectory is None or r.trajectory == trajectory)]
        return recs[offset:offset + limit]

    def status(self, recent: int = 200) -> dict[str, Any]:
        """Queue lengths, pools, recent ACT and the epoch loop's health."""
        with self.lock:
            states: dict[str, int] = {}
            for r in self.records.values():
                states[r.state] = states.get(r.state, 0) + 1
            done = [r.act_s for r in self.records.values() if r.act_s is not None][-recent:]
            pools = self._pools()
        acts = np.array(done) if done else np.zeros(0)
        return {"policy": self.name, "states": states, "pending": states.get("pending", 0),
                "running": states.get("running", 0), "trajectories": len(self.trajectories),
                "resumed": self.resumed, "pools": pools,
                "recent_act": {"count": len(done), "mean_s": float(acts.mean()) if done else None,
                               "p50_s": float(np.percentile(acts, 50)) if done else None,
                               "p99_s": float(np.percentile(acts, 99)) if done else None},
                "epochs": self.epochs, "max_epoch_lag_s": self.max_lag_s, "max_epoch_s": self.max_epoch_s}

    def close(self) -> None:
        """Stop the epoch loop and the executor, close the journal."""
        self._stop.set()
        self._poke()
        self._thread.join(5)
        shutdown = getattr(self.executor, "shutdown", None)
        if shutdown is not None:
            shutdown()
        with self.lock:
            self.journal.close()

    # ------------------------------------------------------------------ completions

    def _on_complete(self, action_id: str, outcome: ActionOutcome) -> None:
        """The executor's callback (its waiter thread)."""
        with self.lock:
            now = self.clock.now()
            try:
                self.policy.complete(action_id, outcome)
            except KeyError:
                log.warning("runner: completion of %s, which is not running", action_id)
            self.journal.append("result", now, action=action_id, status=outcome.status, result=outcome.result)
            rec = self.records.get(action_id)
            if rec is not None and not rec.done:
                rec.duration_s, rec.signals = outcome.duration_s, dict(outcome.signals)
                self._finish(rec, outcome.status, now, outcome.result)
        self._poke()

    def _finish(self, rec: Record, status: str, now: float, result: Any = None) -> None:
        rec.state, rec.finished_at, rec.result = status, now, result
        self.metrics.finished.labels(rec.kind, status).inc()
        self.metrics.act.labels(rec.kind).observe(rec.act_s)
        for loop, fut in rec.waiters:
            loop.call_soon_threadsafe(_resolve, fut)
        rec.waiters.clear()

    # ------------------------------------------------------------------ the epoch loop

    def _poke(self) -> None:
        """An event happened: an epoch is due now (subject to the minimum interval)."""
        with self._cv:
            if self._trigger_at is None:
                self._trigger_at = time.time()
            self._cv.notify()

    def _due(self) -> float:
        times = [self._last_epoch + self.tick_s]
        times += [t for t in (self._trigger_at, self._next_s) if t is not None]
        return max(min(times), self._last_epoch + (self.policy.min_epoch_interval_s if self._busy else 0.0))

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                due = self._due()
                delay = due - time.time()
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                self._trigger_at = None
            start = time.time()
            try:
                with self.lock:
                    report = self.policy.epoch(self.clock.now())
                    self._after_epoch(report)
            except Exception:  # the loop must outlive one bad epoch
                log.exception("runner: epoch failed")
                report = None
            end = time.time()
            self._last_epoch, self._next_s = start, report.next_s if report is not None else None
            self._busy = report is None or report.pending > 0
            self._observe(start - due, end - start)

    def _observe(self, lag_s: float, epoch_s: float) -> None:
        lag_s = max(lag_s, 0.0)
        self.epochs += 1
        self.max_lag_s, self.max_epoch_s = max(self.max_lag_s, lag_s), max(self.max_epoch_s, epoch_s)
        m = self.metrics
        m.epochs.inc()
        m.epoch_lag.observe(lag_s)
        m.max_epoch_lag.set(self.max_lag_s)
        m.epoch_time.observe(epoch_s)

    def _after_epoch(self, report: EpochReport) -> None:
        """Mark dispatched actions running and update the gauges (under the lock)."""
        m, running = self.metrics, getattr(self.policy, "running", {})
        for aid in report.dispatched:
            rec, job = self.records.get(aid), running.get(aid)
            if rec is None or rec.done:
                continue  # it failed to launch and completed already
            rec.state, rec.dispatched_at = "running", report.now_s
            m.queue_wait.labels(rec.kind).observe(max(report.now_s - rec.submitted_at, 0.0))
            if job is not None and job.assignment is not None:
                p = job.assignment.placement
                rec.node, rec.cores, rec.gpus, rec.quota = p.node, p.cores, p.gpus, p.quota
                if job.loads and job.action.model:
                    m.model_loads.labels(job.action.model).inc(len(job.loads))
        if report.status is not None:
            m.solve_time.observe(report.runtime_s)
            wanted = getattr(getattr(self.policy, "config", None), "solver", None)
            if wanted is not None and report.solver != wanted:
                m.fallbacks.inc()
        m.pending.set(report.pending)
        m.running.set(report.running)
        for pool, busy in self._pools_busy().items():
            m.utilisation.labels(pool).set(busy)

    def _pools_busy(self) -> dict[str, float]:
        """Busy fraction per pool: cpu (cores), gpu, and each quota (concurrency)."""
        led, f = getattr(self.policy, "ledger", None), self.fleet
        if led is None:
            return {}
        out = {}
        if f.nodes:
            out["cpu"] = 1 - sum(led.cores.values()) / sum(n.cores for n in f.nodes)
        if f.gpus:
            out["gpu"] = len(led.gpus_busy) / len(f.gpus)
        for q in f.quotas:
            out[f"quota:{q.id}"] = 1 - led.quota[q.id] / q.concurrency
        return out

    def _pools(self) -> dict[str, Any]:
        led, f = getattr(self.policy, "ledger", None), self.fleet
        return {"nodes": {n.id: {"cores": n.cores, "free_cores": led.cores[n.id] if led else None} for n in f.nodes},
                "gpus": {g.id: {"type": g.type, "busy": bool(led and g.id in led.gpus_busy)} for g in f.gpus},
                "quotas": {q.id: {"concurrency": q.concurrency, "free": led.quota[q.id] if led else None}
                           for q in f.quotas},
                "busy": self._pools_busy()}

    # ------------------------------------------------------------------ recovery

    def _recover(self, events: list[dict[str, Any]]) -> int:
        """Restore trajectories, finished actions and their results; re-submit the unfinished. Returns how many."""
        if not events:
            return 0
        accepted: dict[str, Action] = {}
        ended: dict[str, dict[str, Any]] = {}
        results: dict[str, Any] = {}
        open_: dict[str, float] = {}
        for e in events:
            t = e["type"]
            if t == "accepted":
                accepted[e["action"]["id"]] = Action.model_validate(e["action"])
            elif t in ("completed", "cancelled"):
                ended[e["action"]] = e
            elif t == "result":
                results[e["action"]] = e.get("result")
            elif t == "sandbox_open":
                open_[e["trajectory"]] = e.get("memory_gb", 0.0)
            elif t == "sandbox_close":
                open_.pop(e["trajectory"], None)
        for tid, memory_gb in open_.items():
            try:
                self.open_trajectory(tid, memory_gb)
            except ValueError as e:
                log.warning("runner: cannot re-open trajectory %s: %s", tid, e)
        finished_end = getattr(self.policy, "finished_end", None)  # lags of resumed actions refer to these
        for aid, e in ended.items():
            if aid not in accepted:
                continue
            rec = self.records[aid] = Record.of(accepted[aid])
            rec.state, rec.finished_at = e.get("status", "cancelled"), e["t"]
            rec.duration_s, rec.signals, rec.result = e.get("duration_s"), e.get("signals", {}), results.get(aid)
            if finished_end is not None:
                finished_end[aid] = e["t"]
        todo = unfinished(events)
        now = self.clock.now()
        for action, payload, tool in todo:
            try:
                self._accept(action, payload, tool)
            except ValueError as e:  # the fleet changed under it: fail it visibly rather than drop it
                rec = self.records[action.id] = Record.of(action)
                self.journal.append("completed", now, action=action.id, status="failed", duration_s=0.0,
                                    load_s=0.0, signals={"error": f"not resumable: {e}"})
                rec.signals = {"error": f"not resumable: {e}"}
                self._finish(rec, "failed", now)
        self.journal.append("recovered", now, resumed=len(todo), finished=len(ended))
        log.info("runner: resumed %d actions, %d finished before", len(todo), len(ended))
        return len(todo)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
