"""The simulator's virtual clock."""

from __future__ import annotations


class VirtualClock:
    """Time that moves only when the event loop says so, seconds."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now - 1e-9:
            raise ValueError(f"clock: cannot go back from {self._now:g}s to {t:g}s")
        self._now = max(self._now, t)
