"""GPU worker: one long-lived actor per GPU hosting reward models.

A model is loaded on first use, kept resident, evicted least-recently-used when
another needs the memory (the same :class:`~tangram.runtime.residency.Residency`
rule the controller plans with), and restored from the host-memory copy its
first load left, which is faster than a cold load. Every call reports how the
model got there (``resident``, ``host`` or ``cold``) and the load time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from pydantic import Field

from tangram.model.instance import Frozen, GiB
from tangram.runtime.models import RewardScorer, create
from tangram.runtime.residency import Residency


class ModelSpec(Frozen):
    """How a fleet model id is served: a plug-in, its options and its GPU memory."""

    plugin: str
    memory_gb: GiB = Field(gt=0, description="Memory taken on each hosting GPU, GiB.")
    options: dict[str, Any] = Field(default_factory=dict)


class GpuWorker:
    """Hosts reward models on one GPU and scores one batch at a time.

    Parameters
    ----------
    gpu_id
        The fleet's GPU id.
    memory_gb
        GPU memory for models, GiB.
    device
        Torch-style device; ``cuda:0`` when this process sees a GPU, else ``cpu``.
    """

    def __init__(self, gpu_id: str, memory_gb: float, device: str | None = None) -> None:
        self.gpu_id = gpu_id
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        self.device = device or ("cuda:0" if visible not in ("", "-1") else "cpu")
        self.residency = Residency({gpu_id: memory_gb}, {})
        self._loaded: dict[str, RewardScorer] = {}
        self._host: dict[str, Any] = {}  # host-memory copies, kept after eviction
        self._lock = threading.Lock()  # a GPU runs one action at a time

    def score(self, action_id: str, model: str, spec: dict[str, Any], requests: list[dict[str, Any]],
              queued_at: float | None = None) -> dict[str, Any]:
        """Make ``model`` resident (loading or restoring it), then score ``requests``."""
        queued_at = time.time() if queued_at is None else queued_at
        with self._lock:
            started = time.time()
            source, evicted = self._ensure(model, ModelSpec.model_validate(spec))
            loaded_at = time.time()
            scores = self._loaded[model].score(requests) if requests else []
            ended = time.time()
        return {"action": action_id, "gpu": self.gpu_id, "model": model, "scores": scores, "source": source,
                "load_s": loaded_at - started, "evicted": evicted, "queued_at": queued_at, "started_at": started,
                "ended_at": ended, "score_s": ended - loaded_at}

    def _ensure(self, model: str, spec: ModelSpec) -> tuple[str, list[str]]:
        self.residency.model_memory[model] = spec.memory_gb
        loaded, evicted = self.residency.use(model, self.gpu_id)
        for m in evicted:
            self._loaded.pop(m).unload()
        if not loaded:
            return "resident", evicted
        plugin = create(spec.plugin, **spec.options)
        source = "host" if model in self._host else "cold"
        self._host[model] = plugin.load(self.device, self._host.get(model))
        self._loaded[model] = plugin
        return source, evicted

    def resident(self) -> list[str]:
        return list(self.residency.snapshot().get(self.gpu_id, ()))

    def info(self) -> dict[str, Any]:
        return {"gpu": self.gpu_id, "device": self.device, "resident": self.resident(),
                "host_copies": sorted(self._host), "used_gb": self.residency.used_gb(self.gpu_id), "pid": os.getpid()}
