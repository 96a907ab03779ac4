"""What is held right now: the instantaneous capacity accounting of a fleet.

A plan is checked against the future by the solvers; the ledger checks the
present. The controller uses it as the last guard before a dispatch (and to
enforce quota rates over calls that already finished), the simulated pools use
it to prove that no policy ever over-commits, and baselines use it to decide.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tangram.model.instance import Sandbox

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Hold:
    """The resources one in-flight action holds."""

    node: str | None = None
    cores: int = 0
    memory_gb: float = 0.0
    gpus: tuple[str, ...] = ()
    quota: str | None = None
    renewable: tuple[tuple[str, int], ...] = ()


class Ledger:
    """Free capacity now, per node, GPU, quota and renewable; recent quota calls."""

    def __init__(self, fleet) -> None:
        self.cores = {n.id: n.cores for n in fleet.nodes}
        self.memory = {n.id: n.memory_gb for n in fleet.nodes}
        self.memory_checked = {n.id: n.memory_gb > 0 for n in fleet.nodes}
        self.gpus_busy: set[str] = set()
        self.quota = {q.id: q.concurrency for q in fleet.quotas}
        self.rate = {q.id: (q.calls_per_window, q.window_s) for q in fleet.quotas if q.calls_per_window}
        self.calls: dict[str, deque[float]] = {q: deque() for q in self.rate}
        self.renewable = {r.id: r.capacity for r in fleet.renewables}
        self.holds: dict[str, Hold] = {}

    # ------------------------------------------------------------------ sandboxes

    def reserve(self, sandbox: Sandbox, sign: int = 1) -> None:
        """Reserve (sign=1) or return (sign=-1) a sandbox's memory on its node."""
        self.memory[sandbox.node] -= sign * sandbox.memory_gb

    # ------------------------------------------------------------------ actions

    def tokens(self, quota: str, now: float) -> int:
        """Rate tokens free at ``now``: a call holds one for a window after its start."""
        if quota not in self.rate:
            return 1 << 30
        calls, window = self.rate[quota]
        q = self.calls[quota]
        while q and q[0] <= now - window + EPS:
            q.popleft()
        return calls - len(q)

    def token_free_at(self, quota: str) -> float | None:
        """When the oldest held rate token returns, or None."""
        if quota not in self.rate or not self.calls[quota]:
            return None
        return self.calls[quota][0] + self.rate[quota][1]

    def why_not(self, h: Hold, now: float) -> str | None:
        """The first rule ``h`` would break if taken now, or None when it fits."""
        if h.node is not None:
            if h.cores > self.cores[h.node]:
                return f"cores {h.node}"
            if self.memory_checked[h.node] and h.memory_gb > self.memory[h.node] + EPS:
                return f"memory {h.node}"
        for g in h.gpus:
            if g in self.gpus_busy:
                return f"gpu {g}"
        if h.quota is not None:
            if self.quota[h.quota] < 1:
                return f"quota {h.quota}"
            if self.tokens(h.quota, now) < 1:
                return f"rate {h.quota}"
        for r, u in h.renewable:
            if u > self.renewable[r]:
                return f"renewable {r}"
        return None

    def acquire(self, action: str, h: Hold, now: float) -> None:
        """Take ``h`` for ``action`` (the caller checked :meth:`why_not`)."""
        self._apply(h, -1)
        self.gpus_busy.update(h.gpus)
        if h.quota in self.calls:
            self.calls[h.quota].append(now)
        self.holds[action] = h

    def release(self, action: str) -> Hold | None:
        """Return what ``action`` held (None if it held nothing)."""
        h = self.holds.pop(action, None)
        if h is not None:
            self._apply(h, +1)
            self.gpus_busy.difference_update(h.gpus)
        return h

    def _apply(self, h: Hold, sign: int) -> None:
        if h.node is not None:
            self.cores[h.node] += sign * h.cores
            self.memory[h.node] += sign * h.memory_gb
        if h.quota is not None:
            self.quota[h.quota] += sign
        for r, u in h.renewable:
            self.renewable[r] += sign * u
