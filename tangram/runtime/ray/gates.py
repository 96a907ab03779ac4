"""API quota gates: a concurrency cap and a rate (calls per window) per service.

:class:`QuotaGate` is the rule, thread-safe and usable from asyncio. Its
semantics are the checker's: at most ``concurrency`` calls in flight, and every
call holds one of ``calls_per_window`` tokens for ``window_s`` after its start.
:class:`ApiGate` runs registered callables through a gate (one per quota; a
threaded Ray actor in the live runtime). An API action's payload names the
callable: ``{"call": "echo", "args": {...}}``; a name not registered is read
as ``"package.module:function"``.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from tangram.model.instance import ApiQuota


class QuotaGate:
    """Admits calls under a concurrency cap and a sliding-window rate.

    Parameters
    ----------
    concurrency
        Calls in flight at once.
    calls_per_window, window_s
        At most ``calls_per_window`` call starts in any ``window_s`` seconds; no
        rate cap when None.
    clock
        Monotonic seconds (injected for tests).
    """

    def __init__(self, concurrency: int, calls_per_window: int | None = None, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if concurrency < 1 or (calls_per_window is not None and calls_per_window < 1) or window_s <= 0:
            raise ValueError("gate: concurrency and calls_per_window must be >= 1, window_s > 0")
        self.concurrency, self.calls_per_window, self.window_s = concurrency, calls_per_window, window_s
        self._clock = clock
        self._cond = threading.Condition()
        self._in_flight = 0
        self._starts: deque[float] = deque()  # starts still holding a rate token

    @classmethod
    def of(cls, quota: ApiQuota, clock: Callable[[], float] = time.monotonic) -> QuotaGate:
        return cls(quota.concurrency, quota.calls_per_window, quota.window_s, clock)

    def try_acquire(self) -> float | None:
        """Take a slot now (returns None) or say how long to wait, seconds (inf: until a release)."""
        with self._cond:
            now = self._clock()
            while self._starts and self._starts[0] + self.window_s <= now:
                self._starts.popleft()
            if self._in_flight >= self.concurrency:
                return math.inf
            if self.calls_per_window is not None and len(self._starts) >= self.calls_per_window:
                return self._starts[0] + self.window_s - now
            self._in_flight += 1
            if self.calls_per_window is not None:
                self._starts.append(now)
            return None

    def acquire(self, timeout_s: float | None = None) -> bool:
        """Block until admitted; False when ``timeout_s`` passes first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (wait := self.try_acquire()) is not None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._cond:
                self._cond.wait(min(x for x in (wait, left, 3600.0) if x is not None))
        return True

    async def acquire_async(self, timeout_s: float | None = None, poll_s: float = 0.005) -> bool:
        """Like :meth:`acquire` without blocking the event loop."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (wait := self.try_acquire()) is not None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await asyncio.sleep(min(x for x in (wait, left, poll_s) if x is not None))
        return True

    def release(self) -> None:
        with self._cond:
            if self._in_flight <= 0:
                raise RuntimeError("gate: release without acquire")
            self._in_flight -= 1
            self._cond.notify_all()

    @contextmanager
    def slot(self, timeout_s: float | None = None):
        if not self.acquire(timeout_s):
            raise TimeoutError(f"gate: no slot within {timeout_s:g} s")
        try:
            yield
        finally:
            self.release()

    @asynccontextmanager
    async def aslot(self, timeout_s: float | None = None):
        if not await self.acquire_async(timeout_s):
            raise TimeoutError(f"gate: no slot within {timeout_s:g} s")
        try:
            yield
        finally:
            self.release()

    @property
    def in_flight(self) -> int:
        return self._in_flight


# --------------------------------------------------------------------------- callables

_CALLS: dict[str, Callable[..., Any]] = {}


def register_call(name: str, fn: Callable[..., Any] | None = None):
    """Register an API callable under ``name`` (usable as a decorator)."""
    def add(f: Callable[..., Any]) -> Callable[..., Any]:
        _CALLS[name] = f
        return f

    return add(fn) if fn is not None else add


def resolve_call(name: str) -> Callable[..., Any]:
    """A registered callable, or ``"module:attr"`` imported."""
    if name in _CALLS:
        return _CALLS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise KeyError(f"api call: unknown callable {name!r}; known: {', '.join(sorted(_CALLS))}")
    return getattr(importlib.import_module(module), attr)


@register_call("echo")
def _echo(**args: Any) -> dict[str, Any]:
    return args


@register_call("sleep")
def _sleep(seconds: float = 0.0, **args: Any) -> dict[str, Any]:
    time.sleep(seconds)
    return {"slept_s": seconds, **args}


@register_call("http_get")
def _http_get(url: str, timeout_s: float = 10.0, max_bytes: int = 65536) -> dict[str, Any]:
    import httpx

    r = httpx.get(url, timeout=timeout_s)
    return {"status": r.status_code, "text": r.text[:max_bytes]}


class ApiGate:
    """Runs API calls of one quota through its :class:`QuotaGate`."""

    def __init__(self, quota: ApiQuota) -> None:
        self.quota = quota
        self.gate = QuotaGate.of(quota)

    def call(self, action_id: str, payload: dict[str, Any], queued_at: float | None = None) -> dict[str, Any]:
        """Wait for a slot, run the named callable, report timings (epoch seconds)."""
        queued_at = time.time() if queued_at is None else queued_at
        fn = resolve_call(payload["call"])
        with self.gate.slot():
            started = time.time()
            try:
                result, error = fn(**payload.get("args", {})), None
            except Exception as e:  # the call's failure is the action's result, not the gate's
                result, error = None, f"{type(e).__name__}: {e}"
            ended = time.time()
        return {"action": action_id, "quota": self.quota.id, "result": result, "error": error,
                "queued_at": queued_at, "started_at": started, "ended_at": ended, "wall_s": ended - started}

    def stats(self) -> dict[str, Any]:
        return {"quota": self.quota.id, "in_flight": self.gate.in_flight}
