"""The step-function profile against a brute-force timeline."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tangram.solver.profile import Profile

HORIZON = 60


def brute_earliest(usage: list[float], capacity: float, start: int, duration: int, demand: float) -> int:
    s = start
    while any(usage[t] + demand > capacity + 1e-9 for t in range(s, min(s + max(duration, 1), len(usage)))):
        s += 1
    return s


ops = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 10), st.integers(-2, 3)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 4), ops=ops, query=st.tuples(st.integers(0, 30), st.integers(1, 8), st.integers(1, 4)))
def test_earliest_and_peak_match_a_brute_force_timeline(capacity, ops, query):
    profile, usage = Profile(capacity), [0.0] * (HORIZON + 20)
    for start, length, demand in ops:
        end = start + length
        if demand < 0:  # only remove what is there, as water-filling does
            if min(usage[start:end]) < -demand:
                continue
        elif demand > capacity or profile.earliest(start, length, demand) != start:
            continue  # only feasible additions, as list scheduling makes
        profile.add(start, end, demand)
        for t in range(start, end):
            usage[t] += demand
    start, duration, demand = query
    if demand <= capacity:
        assert profile.earliest(start, duration, demand) == brute_earliest(usage, capacity, start, duration, demand)
    assert profile.peak(start, start + duration) == max(usage[start:start + duration])
