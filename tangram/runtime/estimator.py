"""Online duration estimation from completed actions.

Durations are learned as *base seconds*: the duration on the action's reference
resource (one core for an elastic CPU action, one speed-1 GPU for a reward
scoring, the first mode otherwise). The controller converts a measured run
back to base seconds with the ratio it planned with, and rescales the modes of
a new action from the estimate (:func:`with_base`).

Estimates are keyed by the causal signal of the trajectory's previous call
(Libra): a failed compile predicts a retry, a timeout a long tail. The chain of
fallbacks is (task, tool, prev) -> (task, tool) -> (tool,) -> the submitter's
own hint -> the per-kind prior.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tangram.model.instance import Action

#: Base seconds assumed for a kind when nothing was learned and nothing hinted.
DEFAULT_PRIORS: dict[str, float] = {"cpu": 5.0, "gpu": 1.0, "api": 1.0, "generic": 1.0}
MIN_BASE_S = 1e-3  # keeps ratios finite for zero-length hints


class EstimateKey(NamedTuple):
    """What an estimate is conditioned on."""

    task: str
    tool: str
    prev: str = "none"  # outcome of the trajectory's previous call: none / ok / failed / timeout


class Estimate(NamedTuple):
    """Base seconds: the mean to plan with and a high quantile for overdue runs."""

    mean_s: float
    high_s: float
    samples: int = 0
    source: str = "prior"  # which level of the fallback chain answered


class Estimator(Protocol):
    """What the controller asks for and tells back."""

    def estimate(self, action: Action, key: EstimateKey) -> Estimate: ...

    def observe(self, action: Action, key: EstimateKey, base_s: float) -> None: ...


# --------------------------------------------------------------------------- base seconds


def base_seconds(action: Action) -> float:
    """The action's declared duration on its reference resource, seconds."""
    if action.elastic is not None:
        return action.elastic.base_s
    if action.work_s is not None:
        return action.work_s
    return action.modes[0].duration_s


def with_base(action: Action, base_s: float) -> Action:
    """The same action with every mode rescaled so that its base is ``base_s``.

    ``model_copy`` skips validation; the inputs were validated on submission and a
    non-negative scale keeps every duration valid.
    """
    base_s = max(float(base_s), 0.0)
    if action.elastic is not None:
        return action.model_copy(update={"elastic": action.elastic.model_copy(update={"base_s": base_s})})
    if action.work_s is not None:
        return action.model_copy(update={"work_s": base_s})
    scale = base_s / max(action.modes[0].duration_s, MIN_BASE_S)
    modes = tuple(m.model_copy(update={"duration_s": m.duration_s * scale}) for m in action.modes)
    return action.model_copy(update={"modes": modes})


# --------------------------------------------------------------------------- learned


@dataclass
class _Stats:
    """Recent samples of one key: running sum for the mean, lazy quantile."""

    samples: deque = field(default_factory=deque)
    total: float = 0.0
    _high: float | None = None

    def add(self, x: float, limit: int) -> None:
        self.samples.append(x)
        self.total += x
        if len(self.samples) > limit:
            self.total -= self.samples.popleft()
        self._high = None

    def mean(self) -> float:
        return self.total / len(self.samples)

    def high(self, q: float) -> float:
        """The q-quantile (nearest rank) of the kept samples, cached until the next sample."""
        if self._high is None:
            xs = sorted(self.samples)
            self._high = xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]
        return self._high


class DurationEstimator:
    """Mean and high quantile of recent base durations per key, learned online.

    Parameters
    ----------
    priors
        Kind -> base seconds used when nothing is learned or hinted.
    quantile
        The high quantile reported (0.9: p90).
    min_samples
        Samples a key needs before it answers instead of its fallback.
    window
        Most recent samples kept per key (a bounded window adapts to drift).
    high_factor
        High estimate = this times the mean where there are no samples.
    use_hint
        Trust the submitter's declared duration before the kind prior.
    """

    def __init__(self, priors: Mapping[str, float] | None = None, quantile: float = 0.9,
                 min_samples: int = 3, window: int = 256, high_factor: float = 2.0,
                 use_hint: bool = True) -> None:
        if not 0 < quantile < 1:
            raise ValueError("quantile: must be in (0, 1)")
        self.priors = {**DEFAULT_PRIORS, **(priors or {})}
        self.quantile, self.min_samples, self.window = quantile, max(1, min_samples), max(1, window)
        self.high_factor, self.use_hint = high_factor, use_hint
        self._stats: dict[tuple, _Stats] = {}

    @staticmethod
    def _levels(key: EstimateKey) -> tuple[tuple, ...]:
        return ((key.task, key.tool, key.prev), (key.task, key.tool), (key.tool,))

    def estimate(self, action: Action, key: EstimateKey) -> Estimate:
        for level in self._levels(key):
            s = self._stats.get(level)
            if s is not None and len(s.samples) >= self.min_samples:
                return Estimate(s.mean(), max(s.high(self.quantile), s.mean()), len(s.samples), "/".join(level))
        hint = base_seconds(action)
        if self.use_hint and hint > 0:
            return Estimate(hint, hint * self.high_factor, 0, "hint")
        prior = self.priors.get(action.kind, DEFAULT_PRIORS["generic"])
        return Estimate(prior, prior * self.high_factor, 0, "prior")

    def observe(self, action: Action, key: EstimateKey, base_s: float) -> None:
        for level in self._levels(key):
            self._stats.setdefault(level, _Stats()).add(float(base_s), self.window)


class OracleEstimator:
    """The true base duration of every action (the 'oracle durations' ablation)."""

    def __init__(self, truth: Mapping[str, float]) -> None:
        self.truth = truth

    def estimate(self, action: Action, key: EstimateKey) -> Estimate:
        true = self.truth[action.id]
        return Estimate(true, true, 1, "oracle")

    def observe(self, action: Action, key: EstimateKey, base_s: float) -> None:
        pass


class DeclaredEstimator:
    """Plans with the durations the submitter declared (no learning)."""

    def estimate(self, action: Action, key: EstimateKey) -> Estimate:
        base = base_seconds(action)
        return Estimate(base, base, 0, "hint")

    def observe(self, action: Action, key: EstimateKey, base_s: float) -> None:
        pass
