"""Configuration of the service: the fleet it schedules onto, how it decides, how often it plans.

A TOML file holds the fleet tables (``[[nodes]]``, ``[[gpus]]``, ``[[quotas]]``,
``[[models]]``, each with the fields of :mod:`tangram.model.instance`), a
``[plugins]`` table mapping a model id to its reward-model plug-in (default: the
plug-in of the same name), a ``[controller]`` table
(:class:`~tangram.runtime.controller.ControllerConfig`) and the service's own keys.
With ``--ray-address`` the nodes and GPUs are discovered instead and only the
quotas, models and plug-ins of the file are used.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import Field

from tangram.model.instance import ApiQuota, CpuNode, Frozen, Gpu, Parallelism, RewardModel
from tangram.runtime.controller import ControllerConfig, Fleet
from tangram.runtime.ray.gpu import ModelSpec


class ServiceConfig(Frozen):
    """Everything ``tangram serve`` needs besides its address and tokens."""

    nodes: tuple[CpuNode, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    quotas: tuple[ApiQuota, ...] = ()
    models: tuple[RewardModel, ...] = ()
    plugins: dict[str, str] = Field(default_factory=dict, description="Model id -> reward-model plug-in name.")
    controller: ControllerConfig = ControllerConfig()
    policy: str = Field(default="tangram", pattern="^(tangram|trajectory-bound)$",
                        description="Who decides: the Tangram controller or the trajectory-bound baseline.")
    cores_per_trajectory: int = Field(default=1, ge=1, description="Baseline: cores a trajectory holds for life.")
    replicas: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Baseline: task -> GPUs dedicated to its reward scoring; others: any GPU.")
    tick_s: float = Field(default=0.25, gt=0, le=60, description="Periodic epoch when no event comes, s.")
    durable: bool = Field(default=False, description="fsync the journal after every event (slower).")
    ray_num_cpus: int | None = Field(default=None, ge=1, description="Embedded Ray's CPUs; this machine's if None.")

    def fleet(self) -> Fleet:
        return Fleet(nodes=self.nodes, gpus=self.gpus, quotas=self.quotas, models=self.models)

    def model_specs(self) -> dict[str, ModelSpec]:
        """How the executor serves each fleet model: its plug-in and GPU memory."""
        return {m.id: ModelSpec(plugin=self.plugins.get(m.id, m.id), memory_gb=m.memory_gb) for m in self.models}

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> ServiceConfig:
        """Load a TOML file (see the module docstring); ``overrides`` replace top-level keys."""
        data = tomllib.loads(Path(path).read_text())
        return cls(**{**data, **overrides})


def default_config(cores: int | None = None, **overrides) -> ServiceConfig:
    """Two CPU nodes sharing this machine's cores, four logical L40 GPUs in two NVLink pairs,
    two API quotas and the two built-in reward models (``unit_tests`` and ``lexical``)."""
    cores = cores or max(2, os.cpu_count() or 2)
    gpus = tuple(Gpu(id=f"g{k}", type="L40", memory_gb=48, machine="gpu0", nvlink_domain=f"nv{k // 2}")
                 for k in range(4))
    one, two = Parallelism(gpus=1, speedup=1.0), Parallelism(gpus=2, speedup=1.8)
    return ServiceConfig(**{
        "nodes": (CpuNode(id="n0", cores=cores, memory_gb=16), CpuNode(id="n1", cores=cores, memory_gb=16)),
        "gpus": gpus,
        "quotas": (ApiQuota(id="web", concurrency=4, calls_per_window=20, window_s=1.0),
                   ApiQuota(id="local", concurrency=64)),
        "models": (RewardModel(id="unit_tests", memory_gb=8, load_s=0.05, parallelism=(one,)),
                   RewardModel(id="lexical", memory_gb=24, load_s=0.3, parallelism=(one, two))),
        **overrides,
    })
