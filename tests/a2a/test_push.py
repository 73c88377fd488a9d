"""The signature and retry policy of push notifications (registry.a2a.push):
the signature is the HMAC a receiver computes with the standard library,
backoff grows with jitter up to its cap, and a Retry-After is waited out
up to its own cap; a full schedule drops what does not fit."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from registry.a2a.push import PushPolicy, PushSender, sign
from registry.a2a.pushconfigs import PushConfigStore
from tests.support.push_tasks import task_store_with

POLICY = PushPolicy(backoff=1.0, max_backoff=8.0, max_retry_after=30.0)


def test_the_signature_is_an_hmac_sha256_of_id_timestamp_and_the_exact_body() -> None:
    body = b'{"task": {"id": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}, "note": "\xc3\xa9"}'
    expected = hmac.new(b"the-key", b"n1.1700000000." + body, hashlib.sha256).hexdigest()
    assert sign("the-key", "n1", 1700000000, body) == f"v1={expected}"
    assert sign("the-key", "n1", 1700000001, body) != sign("the-key", "n1", 1700000000, body)
    assert sign("the-key", "n1", 1700000000, body + b" ") != sign("the-key", "n1", 1700000000, body)


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)])
def test_backoff_doubles_up_to_its_cap_and_jitters_between_half_and_whole(attempt: int, ceiling: float) -> None:
    assert POLICY.delay(attempt, None, draw=lambda: 0.0) == ceiling / 2
    assert POLICY.delay(attempt, None, draw=lambda: 1.0) == ceiling


def test_a_retry_after_is_waited_out_up_to_its_cap_whatever_the_attempt() -> None:
    assert POLICY.delay(1, 12.0) == 12.0
    assert POLICY.delay(4, 0.0) == 0.0
    assert POLICY.delay(2, 3600.0) == 30.0


def test_a_full_schedule_drops_the_notification_and_shutdown_says_how_many_were_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = task_store_with(f"sqlite:///{tmp_path / 'tasks.db'}", {"t1": "alice"})
    configs = PushConfigStore(tasks)
    config = configs.set("t1", owner="alice", config_id="c1", url="https://hooks.example.com/a2a")
    # No worker threads: nothing leaves the schedule, so its bound is reached for sure.
    sender = PushSender(configs, policy=PushPolicy(workers=0, queue_size=2))
    assert sender.submit(config, b"{}") and sender.notify("t1", b"{}")
    assert not sender.submit(config, b"{}")
    sender.close(drain_seconds=0)
    assert not sender.notify("t1", b"{}")
    tasks.close()
    messages = [record.getMessage() for record in caplog.records if record.name == "registry.a2a.push"]
    assert messages == [
        "push notification for task t1 dropped: the sender is closed or has too many pending",
        "push notifications: 2 not sent before shutdown, dropped",
        "push notification for task t1 dropped: the sender is closed or has too many pending",
    ]
