"""Bring the service up: Ray (embedded or joined), the pools, the executor, the runner, uvicorn.

:class:`Service` owns them all; :meth:`Service.start_http` serves the API on a
background thread (tests, the demo) and :func:`serve` blocks (``tangram serve``).
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from pathlib import Path

import ray
import uvicorn

from tangram.runtime.controller import Controller, Fleet
from tangram.runtime.ray import RayExecutor, create_pools, discover, join, start_local
from tangram.runtime.sim.baselines import TrajectoryBoundPolicy, replicas_of
from tangram.service.app import create_app
from tangram.service.config import ServiceConfig, default_config
from tangram.service.runner import Runner

log = logging.getLogger(__name__)


def policy_factory(config: ServiceConfig, fleet: Fleet):
    """The policy the config names, as a :data:`~tangram.runtime.controller.PolicyFactory`."""
    if config.policy == "trajectory-bound":
        return TrajectoryBoundPolicy.factory(cores=config.cores_per_trajectory,
                                             replicas=replicas_of(fleet, config.replicas),
                                             min_epoch_interval_s=config.controller.min_epoch_interval_s)
    return lambda fl, ex, clock, journal: Controller(fl, ex, clock, config.controller, journal=journal)


class Service:
    """Ray, pools, executor and runner of one service.

    Parameters
    ----------
    config
        Fleet, policy and loop settings.
    journal
        The journal file (recovered from when it exists); None keeps none.
    ray_address
        Join this Ray cluster and discover its nodes and GPUs; embedded Ray when None.
    """

    def __init__(self, config: ServiceConfig | None = None, journal: str | Path | None = None,
                 ray_address: str | None = None) -> None:
        self.config = config = config or default_config()
        if ray_address:
            join(ray_address)
            found = discover()
            fleet = Fleet(nodes=found.fleet.nodes, gpus=found.fleet.gpus, quotas=config.quotas, models=config.models)
            where = found.ray_nodes
        else:
            fleet = config.fleet()
            start_local(fleet, num_cpus=config.ray_num_cpus)
            where = None
        self.fleet = fleet
        self.pools = create_pools(fleet, where)
        specs = config.model_specs()
        self.runner = Runner(fleet, lambda done: RayExecutor(self.pools, on_complete=done, models=specs),
                             policy_factory(config, fleet), journal, config.tick_s, config.durable,
                             name=config.policy)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def app(self, tokens):
        return create_app(self.runner, tokens)

    def start_http(self, tokens, host: str = "127.0.0.1", port: int | None = None) -> str:
        """Serve the API on a background thread; returns its base URL once it accepts connections."""
        port = port or free_port(host)
        config = uvicorn.Config(self.app(tokens), host=host, port=port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="tangram-http", daemon=True)
        self._thread.start()
        deadline = time.time() + 30
        while not self._server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"service: HTTP server did not start on {host}:{port}")
            time.sleep(0.02)
        return f"http://{host}:{port}"

    def close(self, shutdown_ray: bool = False) -> None:
        """Stop HTTP, the runner and the pools' actors (and Ray itself if asked)."""
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self.runner.close()
        self.pools.shutdown()
        if shutdown_ray:
            ray.shutdown()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def read_tokens(path: str | Path) -> list[str]:
    """Tokens of a token file: one per line; blank lines and ``#`` comments ignored."""
    lines = Path(path).read_text().splitlines()
    tokens = [t.strip() for t in lines if t.strip() and not t.strip().startswith("#")]
    if not tokens:
        raise ValueError(f"{path}: no token in the token file")
    return tokens


def new_token() -> str:
    return secrets.token_urlsafe(24)


def serve(service: Service, tokens: list[str], host: str = "127.0.0.1", port: int = 8470) -> None:
    """Serve until interrupted, then stop everything."""
    try:
        uvicorn.run(service.app(tokens), host=host, port=port, log_level="info", access_log=False)
    finally:
        service.close(shutdown_ray=True)
