"""Prometheus metrics of one service (its own registry, so several services can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_ACT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class Metrics:
    """The service's instruments; :meth:`render` is the ``/metrics`` body."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.pending = Gauge("tangram_pending_actions", "Actions accepted and not yet dispatched.", registry=r)
        self.running = Gauge("tangram_running_actions", "Actions dispatched and not yet finished.", registry=r)
        self.accepted = Counter("tangram_actions_accepted", "Actions accepted (journaled).", ["kind"], registry=r)
        self.finished = Counter("tangram_actions_finished", "Actions finished, by status.", ["kind", "status"],
                                registry=r)
        self.act = Histogram("tangram_act_seconds", "Action completion time: release to end, s.", ["kind"],
                             buckets=_ACT_BUCKETS, registry=r)
        self.queue_wait = Histogram("tangram_dispatch_wait_seconds", "Release to dispatch, s.", ["kind"],
                                    buckets=_ACT_BUCKETS, registry=r)
        self.utilisation = Gauge("tangram_pool_utilisation", "Busy fraction of a pool at the last epoch.",
                                 ["pool"], registry=r)
        self.epochs = Counter("tangram_epochs", "Scheduling epochs run.", registry=r)
        self.solve_time = Histogram("tangram_solve_seconds", "Solver time per epoch that solved, s.",
                                    buckets=_FAST_BUCKETS, registry=r)
        self.epoch_time = Histogram("tangram_epoch_seconds", "Wall time of one epoch (snapshot, solve, dispatch), s.",
                                    buckets=_FAST_BUCKETS, registry=r)
        self.epoch_lag = Histogram("tangram_epoch_lag_seconds", "How late an epoch started after it was due, s.",
                                   buckets=_FAST_BUCKETS, registry=r)
        self.max_epoch_lag = Gauge("tangram_epoch_lag_max_seconds", "Largest epoch lag so far, s.", registry=r)
        self.fallbacks = Counter("tangram_solver_fallbacks", "Epochs whose plan came from a fallback backend.",
                                 registry=r)
        self.model_loads = Counter("tangram_model_loads", "Reward-model loads onto a GPU.", ["model"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
