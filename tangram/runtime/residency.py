"""Which reward models sit in which GPU's memory, with LRU eviction.

The controller keeps its belief with this class and the simulated pools keep
the truth with the same class, so both evict the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping


class Residency:
    """Per GPU, the resident models in least-recently-used order.

    Parameters
    ----------
    gpu_memory
        GPU id -> memory, GiB.
    model_memory
        Model id -> memory it takes on every GPU that hosts it, GiB.
    """

    def __init__(self, gpu_memory: Mapping[str, float], model_memory: Mapping[str, float]) -> None:
        self.gpu_memory = dict(gpu_memory)
        self.model_memory = dict(model_memory)
        self._lru: dict[str, OrderedDict[str, None]] = {g: OrderedDict() for g in self.gpu_memory}

    def has(self, model: str, gpu: str) -> bool:
        return model in self._lru[gpu]

    def used_gb(self, gpu: str) -> float:
        return sum(self.model_memory[m] for m in self._lru[gpu])

    def use(self, model: str, gpu: str, pinned: Iterable[str] = ()) -> tuple[bool, list[str]]:
        """Make ``model`` resident on ``gpu`` and most recently used.

        Least recently used models not in ``pinned`` (models of actions running
        there) are evicted until it fits. Returns (loaded, evicted models).

        Raises
        ------
        MemoryError
            When the pinned models leave no room: the caller over-committed the GPU.
        """
        lru = self._lru[gpu]
        if model in lru:
            lru.move_to_end(model)
            return False, []
        need = self.model_memory[model]
        pinned = set(pinned)
        evicted: list[str] = []
        free = self.gpu_memory[gpu] - self.used_gb(gpu)
        for m in list(lru):
            if free >= need - 1e-9:
                break
            if m not in pinned:
                del lru[m]
                free += self.model_memory[m]
                evicted.append(m)
        if free < need - 1e-9:
            raise MemoryError(f"gpu {gpu}: model {model} needs {need:g} GiB, pinned models leave {free:g}")
        lru[model] = None
        return True, evicted

    def snapshot(self) -> dict[str, tuple[str, ...]]:
        """GPU id -> resident models (GPUs hosting nothing are left out)."""
        return {g: tuple(lru) for g, lru in self._lru.items() if lru}
