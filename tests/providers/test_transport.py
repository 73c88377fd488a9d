"""The retry policy every provider adapter shares: how long it waits before
each retry, computed, so that the integration tests need only check that the
wait happened (by the order of the requests), never time it."""

from __future__ import annotations

import email.utils
import time

import pytest

from registry.providers.transport import RetryPolicy

POLICY = RetryPolicy(max_retries=3, backoff=0.3, max_backoff=1.0)


def test_retry_after_seconds_are_waited_exactly() -> None:
    assert POLICY.delay(0, {"Retry-After": "1"}) == 1.0
    assert POLICY.delay(2, {"Retry-After": "0"}) == 0.0


def test_a_retry_after_date_is_waited_until() -> None:
    moment = int(time.time()) + 3
    before = time.time()
    waited = POLICY.delay(0, {"Retry-After": email.utils.formatdate(moment, usegmt=True)})
    after = time.time()
    assert moment - after <= waited <= moment - before


def test_a_long_retry_after_is_capped_at_four_times_the_longest_backoff() -> None:
    assert POLICY.delay(0, {"Retry-After": "3600"}) == 4.0


@pytest.mark.parametrize("value", [None, "1.5", "-1", "1e3", "soon"])
def test_without_a_valid_retry_after_the_backoff_doubles_with_jitter_up_to_its_cap(value: str | None) -> None:
    headers = {} if value is None else {"Retry-After": value}
    for attempt, ceiling in [(0, 0.3), (1, 0.6), (2, 1.0), (5, 1.0)]:
        for _ in range(50):
            assert ceiling / 2 <= POLICY.delay(attempt, headers) <= ceiling
