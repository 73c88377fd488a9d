"""Push notifications (registry.a2a.push) sent to a real receiver, its own
process on a free port: signed so that the receiver can verify them,
retried after 503 and 429 (waiting out Retry-After), given up after a
bounded number of attempts, never redirected, and refused toward the
service's own network at the moment of sending unless the operator allows it."""

from __future__ import annotations

import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from registry.a2a.push import PushPolicy, PushSender
from registry.a2a.pushconfigs import PushConfig, PushConfigStore
from registry.protocol.store import TaskStore
from tests.conftest import eventually
from tests.support.push_receiver import PushReceiver, verified
from tests.support.push_tasks import task_store_with
from tests.support.waits import LATE

REPOSITORY = Path(__file__).resolve().parents[2]
LOOPBACK = [ip_network("127.0.0.0/8")]
FAST = PushPolicy(attempts=3, backoff=0.05, max_backoff=0.2, max_retry_after=2.0, timeout=5.0, drain_seconds=20.0)
BODY = json.dumps({"task": {"id": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}}).encode()


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[TaskStore]:
    store = task_store_with(f"sqlite:///{tmp_path / 'tasks.db'}", {"t1": "alice", "t2": "alice"})
    yield store
    store.close()


@pytest.fixture
def configs(tasks: TaskStore) -> PushConfigStore:
    return PushConfigStore(tasks)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="registry.a2a.push")
    return caplog


def send(configs: PushConfigStore, config: PushConfig, *, allowed: list[Any] = LOOPBACK, **options: Any) -> None:
    """One notification of ``BODY`` to ``config``, waited for: ``close`` drains the sender."""
    sender = PushSender(configs, allowed=allowed, policy=FAST, **options)
    assert sender.submit(config, BODY)
    sender.close()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_each_notification_of_a_task_is_signed_with_its_configurations_key(
    tmp_path: Path, configs: PushConfigStore
) -> None:
    with PushReceiver(tmp_path) as receiver:
        base = f"http://localhost:{receiver.port}"
        mine = configs.set("t1", owner="alice", config_id="c1", url=f"{base}/hooks/a2a?from=registry", token="tok-1")
        configs.set("t2", owner="alice", config_id="c1", url=f"{base}/other-task")
        sender = PushSender(configs, allowed=LOOPBACK, policy=FAST)
        assert sender.notify("t1", BODY)
        sender.close()
        [entry] = receiver.received()
    assert entry["path"] == "/hooks/a2a?from=registry" and entry["body"] == BODY
    assert verified(entry, mine.secret) and not verified(entry, "another key")
    headers = entry["headers"]
    assert headers["host"] == f"localhost:{receiver.port}"  # connected to 127.0.0.1, named as configured
    assert headers["content-type"] == "application/json"
    assert headers["x-a2a-notification-token"] == "tok-1"
    assert abs(int(headers["x-registry-timestamp"]) - time.time()) < 300  # what a receiver checks against replays


def test_a_notification_answered_503_twice_is_sent_a_third_time_with_the_same_id(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture
) -> None:
    with PushReceiver(tmp_path, [{"status": 503}, {"status": 503}]) as receiver:
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook")
        send(configs, config)
        received = receiver.received()
    assert len(received) == 3
    assert len({entry["headers"]["x-registry-notification-id"] for entry in received}) == 1
    assert all(verified(entry, config.secret) for entry in received)
    assert warnings(logs) == []


def test_a_retry_after_of_the_receiver_is_waited_out(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture
) -> None:
    with PushReceiver(tmp_path, [{"status": 429, "headers": {"Retry-After": "1"}}]) as receiver:
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook")
        send(configs, config)
        assert len(receiver.received()) == 2
    waits = [record.getMessage() for record in logs.records if "answered 429" in record.getMessage()]
    assert len(waits) == 1 and waits[0].endswith("attempt 2 in 1.0 s (Retry-After)")


def test_a_close_does_not_wait_for_a_drain_that_can_send_nothing_more(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture
) -> None:
    # The next attempt is a minute away (LATE), the drain half of that: a
    # close that waited out its drain would outlast the join below.
    policy = PushPolicy(attempts=3, max_retry_after=LATE, timeout=5.0, drain_seconds=LATE / 2)
    answer = {"status": 503, "headers": {"Retry-After": str(int(LATE))}}
    with PushReceiver(tmp_path, [answer]) as receiver:
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook")
        sender = PushSender(configs, allowed=LOOPBACK, policy=policy)
        assert sender.submit(config, BODY)
        eventually(lambda: any("attempt 2 in" in record.getMessage() for record in logs.records))
        closing = threading.Thread(target=sender.close)
        closing.start()
        closing.join(LATE / 4)
        assert not closing.is_alive()
        assert len(receiver.received()) == 1
    assert warnings(logs) == ["push notifications: 1 not sent before shutdown, dropped"]


def test_a_receiver_that_keeps_failing_is_given_up_after_the_last_attempt_and_logged(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture
) -> None:
    with PushReceiver(tmp_path, [{"status": 500, "repeat": True}]) as receiver:
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook?key=k1")
        send(configs, config)
        assert len(receiver.received()) == FAST.attempts
    [given_up] = warnings(logs)
    assert "given up after 3 attempts: answered 500" in given_up
    assert "key=k1" not in given_up and config.secret not in given_up


def test_a_receiver_trickling_its_answer_is_cut_off_and_does_not_hold_a_worker(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture
) -> None:
    # Each byte comes well within the read timeout: only the whole attempt's bound ends it.
    policy = PushPolicy(attempts=1, timeout=5.0, attempt_seconds=1.0, drain_seconds=20.0)
    with PushReceiver(tmp_path, [{"trickle": 0.2, "repeat": True}]) as receiver:
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook")
        sender = PushSender(configs, allowed=LOOPBACK, policy=policy)
        assert sender.submit(config, BODY)
        sender.close()
        assert len(receiver.received()) == 1
    [given_up] = warnings(logs)
    assert "given up after 1 attempt: ReadTimeout: no answer within 1 s in all" in given_up


def test_a_redirect_is_not_followed(tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture) -> None:
    (tmp_path / "elsewhere").mkdir()
    with PushReceiver(tmp_path / "elsewhere") as elsewhere:
        location = f"http://127.0.0.1:{elsewhere.port}/stolen"
        with PushReceiver(tmp_path, [{"status": 307, "headers": {"Location": location}}]) as receiver:
            config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook")
            send(configs, config)
            assert len(receiver.received()) == 1 and elsewhere.received() == []
    [given_up] = warnings(logs)
    assert "answered 307, a redirect, which is not followed" in given_up


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_a_url_of_the_services_own_network_is_refused_when_sending_unless_allowed(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture, host: str
) -> None:
    with PushReceiver(tmp_path) as receiver:
        # Stored as if it had been allowed when it was set: the check at sending is the one that counts.
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://{host}:{receiver.port}/hook")
        send(configs, config, allowed=[])
        assert receiver.received() == []
        [refused] = warnings(logs)
        assert "loopback addresses are refused unless the operator allows their network" in refused
        assert "given up after 1 attempt:" in refused
        if host != "[::ffff:127.0.0.1]":  # reached only where IPv6 sockets take IPv4-mapped addresses
            send(configs, config, allowed=LOOPBACK)
            assert len(receiver.received()) == 1


def test_tls_checks_the_certificate_against_the_urls_name_not_the_address_connected_to(
    tmp_path: Path, configs: PushConfigStore, logs: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    with PushReceiver(tmp_path, ca=ca) as receiver:  # a certificate for localhost only
        by_name = configs.set("t1", owner="alice", config_id="c1", url=f"https://localhost:{receiver.port}/hook")
        send(configs, by_name, verify=trusting)
        [entry] = receiver.received()
        assert verified(entry, by_name.secret) and entry["headers"]["host"] == f"localhost:{receiver.port}"
        by_address = configs.set("t1", owner="alice", config_id="c2", url=f"https://127.0.0.1:{receiver.port}/hook")
        send(configs, by_address, verify=trusting)
        assert len(receiver.received()) == 1
    [given_up] = warnings(logs)
    assert "CERTIFICATE_VERIFY_FAILED" in given_up


def documented_verify() -> Callable[..., bool]:
    """The ``verify`` function of docs/a2a.md, as a receiver would copy it."""
    page = (REPOSITORY / "docs" / "a2a.md").read_text(encoding="utf-8")
    [example] = [code for code in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "def verify(" in code]
    namespace: dict[str, Any] = {}
    exec(compile(example, "docs/a2a.md", "exec"), namespace)
    verify: Callable[..., bool] = namespace["verify"]
    return verify


def test_the_verification_example_of_the_docs_accepts_a_notification_and_nothing_changed(
    tmp_path: Path, configs: PushConfigStore
) -> None:
    verify = documented_verify()
    with PushReceiver(tmp_path) as receiver:
        config = configs.set("t1", owner="alice", config_id="c1", url=f"http://127.0.0.1:{receiver.port}/hook")
        send(configs, config)
        [entry] = receiver.received()
    headers, body = httpx.Headers(entry["headers"]), entry["body"]
    sent_at = int(headers["X-Registry-Timestamp"])
    assert verify(headers, body, config.secret, now=sent_at)
    assert not verify(headers, body + b" ", config.secret, now=sent_at)
    assert not verify(headers, body, config.secret + "x", now=sent_at)
    assert not verify(headers, body, config.secret, now=sent_at + 301)  # replayed later
    replayed = httpx.Headers({**headers, "X-Registry-Timestamp": str(sent_at + 600)})
    assert not verify(replayed, body, config.secret, now=sent_at + 600)  # a fresh timestamp, not signed
