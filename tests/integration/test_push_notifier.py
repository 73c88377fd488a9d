"""What a task's changes send (registry.a2a.pushnotifier), told by the
service's task log (``TaskLog``) over a real SQLite store, received by a
real receiver, its own process on a free port: each state once, with the
pending action or the error; files as bytes or links; the task as it is
to a configuration just set; nothing once the notifier is closed.

Each test writes the task's rows as they end up before it appends the
entries: the notifier reads them on its own thread, later."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from a2a.types import TaskPushNotificationConfig

from registry.a2a.mapping import INLINE_BYTES
from registry.a2a.push import PushPolicy
from registry.a2a.pushconfigs import PushConfigStore
from registry.a2a.pushnotifier import PushNotifier
from registry.a2a.pushrequests import StoredPushConfigs
from registry.protocol.records import ActionRecord, ArtifactRecord, TaskRecord
from registry.protocol.service import Caller
from registry.protocol.store import TaskStore
from registry.protocol.tasklog import TaskLog
from tests.support.push_receiver import PushReceiver, verified
from tests.support.push_tasks import task_store_with

LOOPBACK = [ip_network("127.0.0.0/8")]
FAST = PushPolicy(attempts=2, backoff=0.05, max_backoff=0.1, timeout=5.0, drain_seconds=20.0)
NOW = datetime(2026, 5, 9, 12, 30, tzinfo=timezone.utc)


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[TaskStore]:
    store = task_store_with(f"sqlite:///{tmp_path / 'tasks.db'}", {"t1": "alice", "t2": "alice"})
    yield store
    store.close()


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[PushReceiver]:
    with PushReceiver(tmp_path) as running:
        yield running


@pytest.fixture
def notifier(tasks: TaskStore) -> Iterator[PushNotifier]:
    made = PushNotifier(tasks, allowed=LOOPBACK, policy=FAST)
    yield made
    made.close()


def configured(tasks: TaskStore, receiver: PushReceiver, task_id: str = "t1") -> str:
    """A configuration of the task sending to ``receiver``; its key."""
    url = f"http://127.0.0.1:{receiver.port}/hook"
    return PushConfigStore(tasks).set(task_id, owner="alice", config_id="c1", url=url).secret


def as_it_ends(tasks: TaskStore, task_id: str, status: str, **fields: Any) -> TaskRecord:
    """The task's row, written as it is once the entries are appended."""
    task = tasks.get_task(task_id, owner=None)
    assert task is not None
    changed = replace(task, status=status, updated_at=NOW, **fields)
    assert tasks.set_task_status(task_id, from_states=[task.status], task=changed)
    return changed


def received(notifier: PushNotifier, receiver: PushReceiver) -> list[dict[str, Any]]:
    """What the receiver got once the notifier sent everything, by ``seq``."""
    notifier.close()
    return sorted((json.loads(entry["body"]) for entry in receiver.received()), key=_seq)


def _seq(body: dict[str, Any]) -> float:
    [(_, member)] = body.items()
    seq: float = member["metadata"]["seq"]
    return seq


def told(bodies: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """Each status update's ``seq`` and state."""
    return [(_seq(body), body["statusUpdate"]["status"]["state"]) for body in bodies if "statusUpdate" in body]


def test_each_state_is_told_once_and_a_task_queued_again_is_not(
    tasks: TaskStore, receiver: PushReceiver, notifier: PushNotifier
) -> None:
    key = configured(tasks, receiver)
    task = as_it_ends(tasks, "t1", "completed", outcome="completed")
    log = TaskLog(tasks, listeners=[notifier])
    for status in ("queued", "running", "running", "completed"):
        log.state(replace(task, status=status))
    bodies = received(notifier, receiver)
    assert told(bodies) == [(2, "TASK_STATE_WORKING"), (4, "TASK_STATE_COMPLETED")]
    assert all(verified(entry, key) for entry in receiver.received())
    assert bodies[0]["statusUpdate"]["taskId"] == "t1" and bodies[0]["statusUpdate"]["metadata"]["kind"] == "state"


def test_a_wait_is_told_with_its_pending_action(
    tasks: TaskStore, receiver: PushReceiver, notifier: PushNotifier
) -> None:
    configured(tasks, receiver)
    action = ActionRecord("a1", "t1", "s1", "k1", "x/y", "job_log", {"job_id": 7}, "look", "pending", NOW)
    tasks.add_action(action)
    task = as_it_ends(tasks, "t1", "waiting_for_input")
    log = TaskLog(tasks, listeners=[notifier])
    log.state(replace(task, status="running"))
    log.state(task)
    [working, waiting] = received(notifier, receiver)
    assert working["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    status = waiting["statusUpdate"]["status"]
    assert status["state"] == "TASK_STATE_INPUT_REQUIRED"
    [asked] = [part["data"]["action"] for part in status["message"]["parts"] if "data" in part]
    assert (asked["action_id"], asked["tool"], asked["arguments"]) == ("a1", "job_log", {"job_id": 7})


def test_a_wait_decided_before_it_is_read_is_not_told_and_a_failure_carries_its_error(
    tasks: TaskStore, receiver: PushReceiver, notifier: PushNotifier
) -> None:
    configured(tasks, receiver)
    task = as_it_ends(tasks, "t1", "failed", outcome="failed", error="the model is away")
    log = TaskLog(tasks, listeners=[notifier])
    for status in ("running", "waiting_for_input", "failed"):
        log.state(replace(task, status=status))
    bodies = received(notifier, receiver)
    assert told(bodies) == [(1, "TASK_STATE_WORKING"), (3, "TASK_STATE_FAILED")]
    assert bodies[-1]["statusUpdate"]["status"]["message"]["parts"] == [{"text": "the model is away"}]


def test_a_small_file_travels_as_bytes_and_a_large_one_as_a_link_below_the_service(
    tasks: TaskStore, receiver: PushReceiver, notifier: PushNotifier
) -> None:
    configured(tasks, receiver)
    log = TaskLog(tasks, listeners=[notifier])
    for name, data in (("small.txt", b"tiny"), ("large.bin", b"x" * (INLINE_BYTES + 1))):
        artifact = ArtifactRecord(name, "t1", True, name, None, "application/octet-stream", len(data), "0" * 64, NOW)
        tasks.add_artifact(artifact, data)
        log.artifact(artifact)
    small, large = (body["artifactUpdate"]["artifact"] for body in received(notifier, receiver))
    assert base64.b64decode(small["parts"][0]["raw"]) == b"tiny"
    assert large["parts"][0]["url"] == "/ap/v1/agent/tasks/t1/artifacts/large.bin"
    assert large["metadata"]["size"] == INLINE_BYTES + 1


def test_a_configuration_just_set_is_sent_the_task_as_it_is_numbered_by_the_last_entry(
    tasks: TaskStore, receiver: PushReceiver, notifier: PushNotifier
) -> None:
    task = as_it_ends(tasks, "t2", "completed", outcome="completed", output="done")
    # Both before any configuration, and sent (to nobody) before it is set:
    # this notifier's thread would otherwise find the configuration set by
    # the time it looks them up.
    earlier = PushNotifier(tasks, allowed=LOOPBACK, policy=FAST)
    log = TaskLog(tasks, listeners=[earlier])
    log.state(replace(task, status="running"))
    log.state(task)
    earlier.close()
    requests = StoredPushConfigs(tasks, allowed=LOOPBACK, on_set=notifier.snapshot)
    made = requests.set(
        Caller("alice"), "t2", TaskPushNotificationConfig(id="late", url=f"http://127.0.0.1:{receiver.port}/hook")
    )
    [snapshot] = received(notifier, receiver)
    shown = snapshot["task"]
    assert (shown["id"], shown["status"]["state"]) == ("t2", "TASK_STATE_COMPLETED")
    assert shown["metadata"]["seq"] == 2 and shown["metadata"]["kind"] == "snapshot"
    assert verified(receiver.received()[0], made.authentication.credentials)


def test_a_closed_notifier_takes_nothing_more_and_says_so(
    tasks: TaskStore, receiver: PushReceiver, notifier: PushNotifier, caplog: pytest.LogCaptureFixture
) -> None:
    configured(tasks, receiver)
    caplog.set_level(logging.WARNING, logger="registry.a2a.pushnotifier")
    notifier.close()
    task = as_it_ends(tasks, "t1", "running")
    TaskLog(tasks, listeners=[notifier]).state(task)
    assert receiver.received() == []
    [dropped] = [record.getMessage() for record in caplog.records]
    assert dropped == (
        "push notifications of task t1 (entry 1) dropped: the notifier is closed or has too many pending"
    )
