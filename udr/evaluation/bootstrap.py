"""Paired bootstrap confidence intervals for the difference between two retrievers' scores.

Both methods are scored on the same test examples, so the difference is resampled in pairs: draw n
example indices with replacement, recompute each method's graded score on that resample (corpus
metrics such as BLEU are recomputed, not averaged per example), and take the difference. The 95%
interval is the 2.5th and 97.5th percentile of the resampled differences (the percentile bootstrap;
Koehn 2004, "Statistical Significance Tests for Machine Translation Evaluation"). A difference is
*resolved*, a claim in either direction, when its unrounded interval clears zero by :data:`CLAIM_MARGIN`.

For the average over tasks, every resample draws each task's indices independently and averages the
per-task differences, so the interval of the average comes from the same resamples as the per-task ones.

One method's own score gets an interval too (:func:`score_interval`): the Wilson score interval where the
score is a share of examples (accuracy, exact match), else the percentile bootstrap of its graded score.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from udr.errors import UdrError
from udr.evaluation.claims import BOOTSTRAP_RESAMPLES, CLAIM_MARGIN
from udr.evaluation.metrics import GradedStatistics

# A function of example indices -> the graded score of one method on those examples.
MetricOn = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class Interval:
    """An observed difference (A - B) and its bootstrap interval."""

    difference: float
    low: float
    high: float

    @property
    def resolved(self) -> bool:
        """Whether the difference is a claim: its unrounded interval clears 0 by :data:`CLAIM_MARGIN`, in
        either direction."""
        return self.low >= CLAIM_MARGIN or self.high <= -CLAIM_MARGIN

    @classmethod
    def of(cls, d: dict) -> Interval:
        """The interval a :meth:`to_dict` wrote (its difference, low and high; `resolved` is recomputed)."""
        return cls(float(d["difference"]), float(d["low"]), float(d["high"]))

    def to_dict(self) -> dict:
        return {"difference": self.difference, "low": self.low, "high": self.high, "resolved": self.resolved}

    def markdown(self) -> str:
        """`+1.2 [-0.3, +2.7]`, in bold where resolved (by the unrounded bounds)."""
        text = f"{self.difference:+.1f} [{self.low:+.1f}, {self.high:+.1f}]"
        return f"**{text}**" if self.resolved else text


@dataclass(frozen=True)
class PairedTask:
    """One task's paired comparison: n test examples and each method's score on a subset of them."""

    n: int
    metric_a: MetricOn
    metric_b: MetricOn


def paired_bootstrap(
    tasks: Sequence[PairedTask], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = 0.95
) -> tuple[list[Interval], Interval]:
    """Intervals of metric_a - metric_b per task and of its mean over the tasks (see the module doc)."""
    if not tasks:
        raise UdrError("paired bootstrap: no tasks to compare")
    if resamples < 1 or not 0 < level < 1:
        raise UdrError(f"paired bootstrap: bad resamples {resamples} or level {level}")
    if any(t.n < 1 for t in tasks):
        raise UdrError("paired bootstrap: a task has no test examples")
    rng = np.random.default_rng(seed)
    observed = np.array([t.metric_a(np.arange(t.n)) - t.metric_b(np.arange(t.n)) for t in tasks])
    diffs = np.empty((resamples, len(tasks)))
    for r in range(resamples):
        for j, t in enumerate(tasks):
            idx = rng.integers(0, t.n, size=t.n)
            diffs[r, j] = t.metric_a(idx) - t.metric_b(idx)
    tail = 100 * (1 - level) / 2

    def interval(observed_value: float, samples: np.ndarray) -> Interval:
        low, high = np.percentile(samples, [tail, 100 - tail])
        return Interval(float(observed_value), float(low), float(high))

    per_task = [interval(observed[j], diffs[:, j]) for j in range(len(tasks))]
    return per_task, interval(observed.mean(), diffs.mean(axis=1))


# Metrics that are a share of examples (percent), for which a score's interval follows from its n alone.
PROPORTION_METRICS = ("accuracy", "exact_match")


def wilson_interval(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of a proportion `p` observed on `n` examples."""
    if n <= 0:
        return (0.0, 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def score_interval(metric: str, predictions: Sequence, examples: Sequence, score: float, *, seed: int = 0) -> dict:
    """The 95% interval of a task's main `score` (percent) on `examples`: {"low", "high", "method"}, Wilson for a
    proportion metric, else the percentile bootstrap of the graded score (equal to the main score there)."""
    n = len(examples)
    if metric in PROPORTION_METRICS:
        low, high = wilson_interval(score / 100, n)
        return {"low": round(100 * low, 2), "high": round(100 * high, 2), "method": "wilson"}
    stats = GradedStatistics(metric, predictions, examples)
    (interval,), _ = paired_bootstrap([PairedTask(n, stats.score, lambda _idx: 0.0)], seed=seed)
    return {"low": round(interval.low, 2), "high": round(interval.high, 2), "method": "bootstrap"}
