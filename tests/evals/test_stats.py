"""The bootstrap interval of a judge score's change: cases resampled
together on both sides, seeded, bounded in work."""

from __future__ import annotations

import pytest

from registry.evals.stats import MAX_DRAWS, CaseScores, bootstrap_change


def varied(count: int) -> list[CaseScores]:
    return [CaseScores((0.5, 0.6), (0.3 + 0.2 * (n % 4), 0.7)) for n in range(count)]


def test_the_interval_is_around_the_change_and_the_same_for_the_same_seed() -> None:
    interval = bootstrap_change(varied(20))
    assert interval is not None
    assert interval.change == pytest.approx(0.65 - 0.55)
    assert interval.low < interval.change < interval.high
    assert (interval.cases, interval.resamples, interval.confidence) == (20, 2000, 0.95)
    assert bootstrap_change(varied(20)) == interval
    assert bootstrap_change(varied(20), seed=7) != interval


def test_cases_are_resampled_in_pairs_so_a_steady_gain_has_no_width() -> None:
    # Each case gains 0.1 on head whatever its score: drawn together on both
    # sides, every resample gives the same change. Sides drawn apart would not.
    interval = bootstrap_change(CaseScores((n / 10,), (n / 10 + 0.1,)) for n in range(9))
    assert interval is not None
    assert interval.low == pytest.approx(0.1) and interval.high == pytest.approx(0.1)


def test_repeats_of_a_case_are_drawn_together() -> None:
    # One case, however many runs: there is nothing to resample but that case.
    interval = bootstrap_change([CaseScores((0.1, 0.9, 0.5), (0.2, 1.0, 0.6))])
    assert interval is not None and interval.low == interval.high == pytest.approx(0.1)


def test_no_interval_without_scores_on_both_sides() -> None:
    assert bootstrap_change([CaseScores((), (0.5,)), CaseScores((), (0.7,))]) is None
    assert bootstrap_change([]) is None


def test_many_cases_get_fewer_resamples_rather_than_a_slow_report() -> None:
    interval = bootstrap_change(varied(2_000))
    assert interval is not None and interval.resamples == MAX_DRAWS // 2_000
