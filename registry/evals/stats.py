"""How sure a change of judge score is: a bootstrap interval, seeded so that
the same results always give the same interval.

What is resampled is **cases**, not runs: the repeats of one case are not
independent (they share the inputs, and often the answer), so they are
drawn together. Each resample draws as many cases as there are, with
replacement, from every case scored on either side; the same draw serves
both sides (the comparison is paired, case by case), and a drawn case
brings every score its runs got on each side. The statistic is head's mean
score minus base's, over the scores drawn, which on the cases as they are
is exactly the change of ``SideSummary.judge_score_mean``. The interval is
the percentile interval of that statistic over the resamples.

The work is bounded: at most ``MAX_DRAWS`` case draws in all, so a dataset
of many thousands of cases gets fewer resamples (never fewer than
``MIN_RESAMPLES``) rather than a slow report.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RESAMPLES = 2000
MIN_RESAMPLES = 100
MAX_DRAWS = 1_000_000
SEED = 31


@dataclass(frozen=True)
class CaseScores:
    """The judge scores one case got on each side (every run's, in order)."""

    base: tuple[float, ...]
    head: tuple[float, ...]


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval of a change: ``low`` to ``high`` at ``confidence``."""

    change: float
    """The change on the cases as they are."""
    low: float
    high: float
    confidence: float
    resamples: int
    """Resamples that gave a value (a resample with no score on a side gives none)."""
    cases: int
    """Cases resampled."""


def bootstrap_change(
    cases: Iterable[CaseScores],
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """The interval of head's mean score minus base's, by resampling cases;
    None when a side has no score at all."""
    scored = [case for case in cases if case.base or case.head]
    base_sums = [math.fsum(case.base) for case in scored]
    head_sums = [math.fsum(case.head) for case in scored]
    base_counts = [len(case.base) for case in scored]
    head_counts = [len(case.head) for case in scored]
    change = _change(base_sums, base_counts, head_sums, head_counts, range(len(scored)))
    if change is None:
        return None
    resamples = max(MIN_RESAMPLES, min(resamples, MAX_DRAWS // len(scored)))
    chooser = random.Random(seed)
    population = range(len(scored))
    values = []
    for _ in range(resamples):
        drawn = chooser.choices(population, k=len(scored))
        value = _change(base_sums, base_counts, head_sums, head_counts, drawn)
        if value is not None:
            values.append(value)
    if not values:
        return None
    values.sort()
    tail = (1 - confidence) / 2
    return Interval(
        change=change,
        low=_quantile(values, tail),
        high=_quantile(values, 1 - tail),
        confidence=confidence,
        resamples=len(values),
        cases=len(scored),
    )


def _change(
    base_sums: Sequence[float],
    base_counts: Sequence[int],
    head_sums: Sequence[float],
    head_counts: Sequence[int],
    drawn: Sequence[int],
) -> float | None:
    # map over the draw, not a loop: this runs for every resample.
    base_count = sum(map(base_counts.__getitem__, drawn))
    head_count = sum(map(head_counts.__getitem__, drawn))
    if not base_count or not head_count:
        return None
    head_mean = sum(map(head_sums.__getitem__, drawn)) / head_count
    return head_mean - sum(map(base_sums.__getitem__, drawn)) / base_count


def _quantile(ordered: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``ordered``, interpolated between neighbours."""
    position = fraction * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)
