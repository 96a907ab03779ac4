"""Step-function resource profiles for list scheduling."""

from __future__ import annotations

from bisect import bisect_right


class Profile:
    """Usage of one cumulative resource over time, against a fixed capacity.

    ``times[k]`` starts a segment of usage ``usage[k]`` that lasts until
    ``times[k + 1]`` (the last one forever). Before ``full_until`` the resource is
    saturated, so searches start there: a queue on one resource stays linear.
    """

    __slots__ = ("capacity", "full_until", "times", "usage")

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self.full_until = 0  # a breakpoint; usage >= capacity on [0, full_until)
        self.times: list[int] = [0]
        self.usage: list[float] = [0.0]

    def earliest(self, start: int, duration: int, demand: float) -> int:
        """Smallest s >= start with usage + demand <= capacity on [s, s + duration)."""
        if demand <= 0:
            return start
        if demand > self.capacity + 1e-9:
            raise ValueError("demand exceeds capacity")
        times, usage, cap = self.times, self.usage, self.capacity + 1e-9
        start = max(start, self.full_until)
        k = bisect_right(times, start) - 1
        s, n = start, len(times)
        while k < n:
            if usage[k] + demand > cap:
                if k + 1 == n:
                    raise AssertionError("profile ends above capacity")
                s = times[k + 1]
            elif k + 1 == n or times[k + 1] >= s + max(duration, 1):
                return s
            k += 1
        return s

    def peak(self, start: int, end: int) -> float:
        """Largest usage on [start, end)."""
        times, usage = self.times, self.usage
        first = bisect_right(times, start) - 1
        return max(usage[first:bisect_right(times, end - 1)])

    def add(self, start: int, end: int, demand: float) -> None:
        """Occupy [start, end) with ``demand`` units."""
        if demand == 0 or end <= start:
            return
        a, b = self._split(start), self._split(end)
        for k in range(a, b):
            self.usage[k] += demand
        if demand < 0:
            self.full_until = min(self.full_until, start)
        elif start <= self.full_until:
            k = bisect_right(self.times, self.full_until) - 1
            while k + 1 < len(self.times) and self.usage[k] >= self.capacity - 1e-9:
                k += 1
            self.full_until = self.times[k]

    def _split(self, t: int) -> int:
        k = bisect_right(self.times, t) - 1
        if self.times[k] == t:
            return k
        self.times.insert(k + 1, t)
        self.usage.insert(k + 1, self.usage[k])
        return k + 1
