"""Reward-model plug-ins: a small protocol and a registry by name.

A plug-in scores a batch of requests (dicts whose keys the plug-in documents)
on one device. The GPU worker owns its life cycle: ``load`` on first use (cold,
or from the host-memory copy a previous ``load`` returned, which is faster),
``score`` while resident, ``unload`` when evicted.

Built in: ``unit_tests`` and ``lexical`` (no download, deterministic) and,
with the ``embed`` extra, ``minilm`` (sentence embeddings, imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["RewardScorer", "register", "create", "names"]


@runtime_checkable
class RewardScorer(Protocol):
    """What a reward model plug-in implements."""

    def load(self, device: str, host: Any | None = None) -> Any:
        """Put the model on ``device`` ("cpu", "cuda:0", ...).

        ``host`` is the host-memory copy an earlier ``load`` returned (None on a
        cold load). Returns the host-memory copy to keep for the next reload.
        """
        ...

    def score(self, requests: Sequence[Mapping[str, Any]]) -> list[float]:
        """One score per request, in order."""
        ...

    def unload(self) -> None:
        """Free the device memory (the host copy stays with the caller)."""
        ...


_REGISTRY: dict[str, Callable[..., RewardScorer]] = {}


def register(name: str, factory: Callable[..., RewardScorer] | None = None):
    """Register a plug-in factory under ``name`` (usable as a decorator)."""
    def add(f: Callable[..., RewardScorer]) -> Callable[..., RewardScorer]:
        _REGISTRY[name] = f
        return f

    return add(factory) if factory is not None else add


def create(name: str, **options: Any) -> RewardScorer:
    """A fresh plug-in instance; ``options`` go to its factory."""
    _builtins()
    if name not in _REGISTRY:
        raise KeyError(f"reward model plug-in: unknown name {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name](**options)


def names() -> list[str]:
    _builtins()
    return sorted(_REGISTRY)


def _builtins() -> None:
    from tangram.runtime.models import embed, lexical  # noqa: F401  (registration side effect)
