"""A2A push notifications as ``agents serve`` sends them: a server that only
answers requests (``--no-worker``) and an ``agents worker`` over one SQLite
database (``tests.support.agent_workers.rig``), configurations set through
the SDK's client, unmodified, and notifications received by real receivers
(``tests.support.push_receiver``), each its own process on a free loopback
port, which the services reach only because they were started with
``--allow-push-to 127.0.0.0/8``. The worker notifies the changes its steps
make; the server those of the requests it answers (a cancel) and the task
as it is to a configuration just set.

Notifications may arrive in any order: each is read by its ``metadata.seq``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.client import Client
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from registry.a2a.mapping import struct_plain
from tests.support.a2a_calls import data, sdk_client, user_message
from tests.support.agent_workers import AgentServer, Rig, act, answer, pipeline_inputs, rig, wait_until
from tests.support.ports import free_port
from tests.support.push_receiver import PushReceiver, verified

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
KEY = "a-receivers-own-key-0123456789abcdef"
"""A signing key the client chooses (32 to 256 printable ASCII characters)."""
ALLOW_LOOPBACK = ["--allow-push-to", "127.0.0.0/8"]
AGENT = "assistant/react_text"

APPROVED = 301
HELD = 303
DECIDED = 311
OTHER_OWNER = 305
RETRIED = 307
UNREACHED = 309
REPLIES: list[dict[str, Any]] = [
    # job_log waits for an approval (--require-approval job_log).
    {
        "when": f"^Pipeline ({APPROVED}|{HELD}|{DECIDED}|{OTHER_OWNER}) failed",
        "content": act("job_log", job_id=1),
        "repeat": True,
    },
    {"when": "job 1: out of memory", "content": answer("approved: out of memory"), "repeat": True},
    {"when": f"^Pipeline ({RETRIED}|{UNREACHED}) failed", "content": answer("finished"), "repeat": True},
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    directory = tmp_path_factory.mktemp("push")
    tokens = {"REGISTRY_API_TOKENS": f"{TOKEN_A},{TOKEN_B}"}
    options = ["--require-approval", "job_log", *ALLOW_LOOPBACK]
    with rig(directory, f"sqlite:///{directory / 'tasks.db'}", REPLIES, env=tokens, workers=1, options=options) as made:
        yield made


def agent_url(server: AgentServer) -> str:
    return f"{server.base}/a2a/agents/{AGENT}"


def receiving(
    receiver: PushReceiver, config_id: str, *, key: str | None = KEY, task_id: str = ""
) -> TaskPushNotificationConfig:
    """A configuration sending to ``receiver``, with the client's ``key`` (None: the service makes one)."""
    url = f"http://127.0.0.1:{receiver.port}/hook"
    config = TaskPushNotificationConfig(id=config_id, task_id=task_id, url=url, token=config_id)
    if key is not None:
        config.authentication.CopyFrom(AuthenticationInfo(scheme="HMAC-SHA256", credentials=key))
    return config


def start(
    server: AgentServer, pipeline: int, *, token: str = TOKEN_A, push: TaskPushNotificationConfig | None = None
) -> Task:
    """The task a message starts (answered at once), with ``push`` in its configuration."""
    request = user_message(data(pipeline_inputs(pipeline)))
    if push is not None:
        request.configuration.task_push_notification_config.CopyFrom(push)
    return asyncio.run(_send(server, request, token=token))


def decide(
    server: AgentServer, task_id: str, *, token: str = TOKEN_A, push: TaskPushNotificationConfig | None = None
) -> None:
    """Approve the task's pending action, with ``push`` in the message's configuration."""
    request = user_message(data({"decision": "approve"}), task_id=task_id)
    if push is not None:
        request.configuration.task_push_notification_config.CopyFrom(push)
    asyncio.run(_send(server, request, token=token))


async def _send(server: AgentServer, request: SendMessageRequest, *, token: str) -> Task:
    async with sdk_client(agent_url(server), token=token) as client:
        [answer] = [event async for event in client.send_message(request)]
        return answer.task


def get_task(server: AgentServer, task_id: str) -> Task:
    async def get(client: Client) -> Task:
        return await client.get_task(GetTaskRequest(id=task_id))

    found: Task = with_client(server, get)
    return found


def with_client(server: AgentServer, call: Any, *, token: str = TOKEN_A) -> Any:
    """``await call(client)`` with the SDK's client of the agent, as ``token``."""

    async def run() -> Any:
        async with sdk_client(agent_url(server), token=token) as client:
            return await call(client)

    return asyncio.run(run())


def notifications(receiver: PushReceiver) -> list[dict[str, Any]]:
    """Every notification received, as JSON, by its ``metadata.seq`` (a
    snapshot, ``task``, before the updates of the same number)."""
    bodies = [json.loads(entry["body"]) for entry in receiver.received()]
    return sorted(bodies, key=lambda body: (_member(body)["metadata"]["seq"], "task" not in body))


def states(receiver: PushReceiver, *, updates_only: bool = False) -> list[str]:
    """The states the notifications tell, in the order of the task's log
    (with ``updates_only``, those of the ``statusUpdate`` notifications)."""
    kinds = ("statusUpdate",) if updates_only else ("statusUpdate", "task")
    return [_member(body)["status"]["state"] for body in notifications(receiver) if next(iter(body)) in kinds]


def ids_of(receiver: PushReceiver) -> list[str]:
    return [entry["headers"]["x-registry-notification-id"] for entry in receiver.received()]


def changes(told: list[str]) -> list[str]:
    """``told`` without repeats in a row: a snapshot may tell the state an update of its own number tells too."""
    return [state for at, state in enumerate(told) if at == 0 or told[at - 1] != state]


def _member(body: dict[str, Any]) -> dict[str, Any]:
    [(_, member)] = body.items()
    found: dict[str, Any] = member
    return found


# --- what a task sends -------------------------------------------------------------------


def test_a_task_with_an_approval_notifies_input_required_then_its_answer_and_completed_each_signed(
    runs: Rig, tmp_path: Path
) -> None:
    with PushReceiver(tmp_path) as receiver:
        task = start(runs.front, APPROVED, push=receiving(receiver, "mine"))
        wait_until(lambda: "TASK_STATE_INPUT_REQUIRED" in states(receiver), "an input-required notification")
        decide(runs.front, task.id)
        # Notifications may arrive out of order (several senders): the answer's file may come after `completed`.
        wait_until(
            lambda: (
                "TASK_STATE_COMPLETED" in states(receiver)
                and any("artifactUpdate" in b for b in notifications(receiver))
            ),
            "a completed notification and the answer's",
        )
        received = receiver.received()
        told = notifications(receiver)
    assert all(verified(entry, KEY) for entry in received)
    assert {entry["headers"]["x-a2a-notification-token"] for entry in received} == {"mine"}
    assert len({entry["headers"]["x-registry-notification-id"] for entry in received}) == len(received)
    # The task as it was once the configuration was kept, then each change after it.
    [snapshot] = [body["task"] for body in told if "task" in body]
    assert snapshot["id"] == task.id
    said = changes(states(receiver))
    assert said[said.index("TASK_STATE_INPUT_REQUIRED") :] == [
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]
    # A state is told once: a decided task is queued before it works, and queued is not told.
    updates = states(receiver, updates_only=True)
    assert updates == changes(updates) and "TASK_STATE_SUBMITTED" not in updates
    waits = [_member(body) for body in told if "artifactUpdate" not in body]
    for waiting in [shown for shown in waits if shown["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"]:
        [asked] = [part["data"]["action"] for part in waiting["status"]["message"]["parts"] if "data" in part]
        assert (asked["tool"], asked["arguments"]) == ("job_log", {"job_id": 1})
    [file] = [body["artifactUpdate"] for body in told if "artifactUpdate" in body]
    assert file["taskId"] == task.id and file["artifact"]["parts"][0]["text"] == "approved: out of memory"
    seqs = [_member(body)["metadata"]["seq"] for body in told if "task" not in body]
    assert len(seqs) == len(set(seqs))


def test_a_configuration_set_on_a_waiting_task_answers_its_key_once_and_the_cancel_is_notified(
    runs: Rig, tmp_path: Path
) -> None:
    task = start(runs.front, HELD)
    wait_until(lambda: get_task(runs.front, task.id).status.state == TaskState.TASK_STATE_INPUT_REQUIRED, "the wait")
    with PushReceiver(tmp_path) as receiver:

        async def configure(client: Client) -> tuple[Any, ...]:
            made = await client.create_task_push_notification_config(
                receiving(receiver, "made-key", key=None, task_id=task.id)
            )
            read = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="made-key")
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            return made, read, listed

        made, read, listed = with_client(runs.front, configure)
        key = made.authentication.credentials
        wait_until(lambda: states(receiver) == ["TASK_STATE_INPUT_REQUIRED"], "the task as it is")
        with_client(runs.front, lambda client: client.cancel_task(CancelTaskRequest(id=task.id)))
        wait_until(lambda: states(receiver)[-1:] == ["TASK_STATE_CANCELED"], "the cancel, from the server")
        received = receiver.received()
    assert made.authentication.scheme == "HMAC-SHA256" and len(key) >= 32
    assert (read.id, read.url, read.token, read.authentication.credentials) == ("made-key", made.url, "made-key", "")
    assert [config.id for config in listed.configs] == ["made-key"] and not listed.configs[0].authentication.credentials
    assert all(verified(entry, key) for entry in received)
    snapshot = json.loads(received[0]["body"])["task"]
    assert snapshot["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert struct_plain(get_task(runs.front, task.id).metadata)["agent"] == snapshot["metadata"]["agent"]

    async def delete(client: Client) -> list[str]:
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="made-key")
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        return [config.id for config in listed.configs]

    assert with_client(runs.front, delete) == []


def test_a_configuration_sent_with_a_decision_is_kept_on_the_task_it_decides(runs: Rig, tmp_path: Path) -> None:
    task = start(runs.front, DECIDED)
    wait_until(lambda: get_task(runs.front, task.id).status.state == TaskState.TASK_STATE_INPUT_REQUIRED, "the wait")
    with PushReceiver(tmp_path) as receiver:
        decide(runs.front, task.id, push=receiving(receiver, "decided"))
        wait_until(lambda: "TASK_STATE_COMPLETED" in states(receiver), "a completed notification")
        received = receiver.received()
    assert all(verified(entry, KEY) for entry in received)
    assert [body["task"]["id"] for body in notifications(receiver) if "task" in body] == [task.id]


def test_every_push_operation_on_another_owners_task_is_task_not_found(runs: Rig) -> None:
    task = start(runs.front, OTHER_OWNER)
    config = TaskPushNotificationConfig(task_id=task.id, id="theirs", url="http://127.0.0.1:9/hook")
    with_client(runs.front, lambda client: client.create_task_push_notification_config(config))
    calls = [
        lambda client: client.create_task_push_notification_config(config),
        lambda client: client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="theirs")
        ),
        lambda client: client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        ),
        lambda client: client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="theirs")
        ),
    ]
    for call in calls:
        with pytest.raises(TaskNotFoundError):
            with_client(runs.front, call, token=TOKEN_B)
    pushed = TaskPushNotificationConfig(id="by-b", url="http://127.0.0.1:9/hook")
    with pytest.raises(TaskNotFoundError):
        decide(runs.front, task.id, token=TOKEN_B, push=pushed)
    with pytest.raises(TaskNotFoundError):
        with_client(
            runs.front,
            lambda client: client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="never-set")
            ),
        )

    async def owners(client: Client) -> list[str]:
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        return [found.id for found in listed.configs]

    assert with_client(runs.front, owners) == ["theirs"]  # still there: B deleted nothing


def test_a_receiver_on_loopback_is_refused_by_a_service_not_allowed_to_reach_it(runs: Rig, tmp_path: Path) -> None:
    at = runs.options.index(ALLOW_LOOPBACK[0])
    guarded = runs.fleet.server("--no-worker", *runs.options[:at], *runs.options[at + 2 :])
    runs.fleet.start(guarded)
    try:
        with PushReceiver(tmp_path) as receiver:
            config = receiving(receiver, "refused")
            before = with_client(guarded, lambda client: client.list_tasks(ListTasksRequest())).total_size
            with pytest.raises(InvalidParamsError) as refused:
                start(guarded, HELD, push=config)
            after = with_client(guarded, lambda client: client.list_tasks(ListTasksRequest())).total_size
            held = start(guarded, HELD)
            config.task_id = held.id
            with pytest.raises(InvalidParamsError) as refused_again:
                with_client(guarded, lambda client: client.create_task_push_notification_config(config))
            assert receiver.received() == []
    finally:
        guarded.stop()
    assert "loopback addresses are refused unless the operator allows their network (--allow-push-to)" in str(
        refused.value
    )
    assert str(refused_again.value) == str(refused.value)
    assert after == before  # refused before its task was created


# --- receivers that fail -----------------------------------------------------------------


def test_a_notification_answered_500_is_sent_again_with_the_same_id(runs: Rig, tmp_path: Path) -> None:
    with PushReceiver(tmp_path, [{"status": 500}]) as receiver:
        start(runs.front, RETRIED, push=receiving(receiver, "retried"))
        wait_until(lambda: "TASK_STATE_COMPLETED" in states(receiver), "a completed notification")
        wait_until(lambda: len(ids_of(receiver)) > len(set(ids_of(receiver))), "a notification sent again")
        received = receiver.received()
    ids = ids_of(receiver)
    # One was answered 500, and sent again: the same id, signed again.
    assert len(ids) == len(set(ids)) + 1
    assert all(verified(entry, KEY) for entry in received)
    logged = runs.front.output() + runs.workers[0].output()
    assert "to configuration 'retried' (http://127.0.0.1:" in logged and "answered 500; attempt 2 in" in logged


def test_receivers_that_are_gone_or_never_answer_neither_hold_nor_fail_the_task(runs: Rig, tmp_path: Path) -> None:
    gone = TaskPushNotificationConfig(id="gone", url=f"http://127.0.0.1:{free_port()}/hook", token="gone-token")
    gone.authentication.CopyFrom(AuthenticationInfo(scheme="HMAC-SHA256", credentials=KEY))
    # It answers a byte a second for a minute, longer than an attempt may
    # last (30 s): a step that waited for a notification would end only
    # after the attempt was cut off, and logged.
    with PushReceiver(tmp_path, [{"trickle": 1.0, "repeat": True}]) as hung:
        task = start(runs.front, UNREACHED, push=receiving(hung, "hung"))
        gone.task_id = task.id
        with_client(runs.front, lambda client: client.create_task_push_notification_config(gone))
        wait_until(lambda: get_task(runs.front, task.id).status.state in _OVER, "the end of the task")
        assert "configuration 'hung'" not in runs.front.output() + runs.workers[0].output()
        assert hung.received()  # it holds what it was sent
    done = get_task(runs.front, task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.artifacts[0].parts[0].text == "finished"
    # Retried, not given up on: the last of its five attempts would come
    # 7.5 to 15 s later (the backoff); test_push_notifications gives up.
    wait_until(lambda: "configuration 'gone'" in _retried(runs), "a second attempt at the receiver that is gone")
    logged = runs.front.output() + runs.workers[0].output()
    assert KEY not in logged and "gone-token" not in logged


_OVER = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED)


def _retried(runs: Rig) -> str:
    lines = (runs.front.output() + runs.workers[0].output()).splitlines()
    return "\n".join(line for line in lines if "; attempt 2 in " in line)
