"""A2A's streams over a task's event log, against a real server process
whose own worker runs the tasks: a streamed message and a streamed decision,
each followed until the task waits for its client or is over, and a
resubscription, read by the SDK's client and as raw server-sent events
checked against the specification's schema; a resubscription (by 0.3's
``tasks/resubscribe``) after its client went away, and a client that stops
reading its stream, which is dropped while another gets everything. Nothing
steps the tasks; some tests write log entries as a worker would."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Part,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError

from registry.a2a.mapping import plain
from registry.protocol import events
from registry.protocol.store import TaskStore
from tests.conftest import LibraryRepo
from tests.support.a2a_calls import data, responses, sdk_client, sse_results, user_message
from tests.support.a2a_schema import check_against_spec
from tests.support.a2a_server import A2AServer
from tests.support.executor_fixtures import REACT
from tests.support.sse import WAIT_SECONDS, Message, parse

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'
# Each reply a moment late, so that a stream opened with the task, or with
# a decision, finds it still on its way (and so has something to follow).
REPLIES: list[dict[str, Any]] = [
    {"when": "^Observation: ox means something$", "content": "Final Answer: an animal", "repeat": True, "delay": 1},
    {"content": ACTION, "repeat": True, "delay": 1},
]
MOVING = {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING}
BUFFER = 16
"""Each stream's buffer in the server's event hub (``REGISTRY_AGENTS_EVENTS_BUFFER``)."""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[A2AServer]:
    library = LibraryRepo(tmp_path_factory.mktemp("stream") / "library").release("v1.0.0", {"a/react.yml": REACT})
    options = ["--require-approval", "lookup", "--events-buffer", str(BUFFER)]
    with A2AServer(library.path, data_dir, REPLIES, *options) as found:
        yield found


@pytest.fixture(scope="module")
def log(data_dir: Path, server: A2AServer) -> Iterator[TaskStore]:
    """The server's task store, opened beside it."""
    store = TaskStore(f"sqlite:///{data_dir / 'tasks.db'}")
    yield store
    store.close()


def agent_url(server: A2AServer) -> str:
    return f"{server.base}/a2a/agents/a/react"


def waiting_task(server: A2AServer) -> Task:
    """A new task, once it waits for the approval of its lookup."""

    async def create() -> Task:
        async with sdk_client(agent_url(server), wait=True) as client:
            [answer] = await responses(client, user_message(Part(text="ox?")))
            return answer.task

    task = asyncio.run(create())
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return task


def test_a_streamed_message_follows_the_task_until_it_waits_for_a_decision(server: A2AServer) -> None:
    async def follow() -> list[StreamResponse]:
        async with sdk_client(agent_url(server), streaming=True) as client:
            return await responses(client, user_message(Part(text="ox?")))

    first, *rest = asyncio.run(follow())
    assert first.task.status.state in MOVING
    states = [answer.status_update.status.state for answer in rest]
    # From the task's creation (the log from its start), through its run, to its approval.
    assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
    assert TaskState.TASK_STATE_WORKING in states and set(states[:-1]) <= MOVING
    waiting = rest[-1].status_update.status.message
    asked = plain(waiting.parts[1].data)["action"]
    assert (asked["tool"], asked["arguments"]) == ("lookup", {"word": "ox"})
    assert all(answer.status_update.task_id == first.task.id for answer in rest)


def test_a_streamed_decision_follows_the_run_to_its_end(server: A2AServer, log: TaskStore) -> None:
    task = waiting_task(server)

    async def approve() -> list[StreamResponse]:
        async with sdk_client(agent_url(server), streaming=True) as client:
            return await responses(client, user_message(data({"decision": "approve"}), task_id=task.id))

    first, *rest = asyncio.run(approve())
    assert first.task.id == task.id and first.task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED
    [answer] = [event.artifact_update.artifact for event in rest if event.HasField("artifact_update")]
    assert (answer.name, answer.parts[0].text) == ("answer.md", "an animal")
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    states = [event.status_update.status.state for event in rest[:-1] if event.HasField("status_update")]
    assert set(states) <= MOVING
    # Each change of state is stamped with the time its entry was logged,
    # not with the task's latest change.
    logged = {entry.seq: entry.created_at for entry in log.events_in([(task.id, 0)], batch=1000)}
    updates = [event.status_update for event in rest if event.HasField("status_update")]
    changes = [update for update in updates if "kind" in update.metadata and update.metadata["kind"] == "state"]
    assert changes and all(
        change.status.timestamp.ToDatetime(tzinfo=timezone.utc)
        == logged[int(str(change.metadata["seq"]).removesuffix(".0"))].astimezone(timezone.utc)
        for change in changes
    )


def test_a_wait_logged_after_its_decision_does_not_end_the_stream(server: A2AServer, log: TaskStore) -> None:
    task = waiting_task(server)

    async def approve() -> list[StreamResponse]:
        async with sdk_client(agent_url(server), streaming=True) as client:
            answers = client.send_message(user_message(data({"decision": "approve"}), task_id=task.id))
            first = await anext(answers)
            # What a worker that commits the wait, then logs it, leaves when a
            # decision comes in between: the entry lands after the decision.
            log.append_event(task.id, events.STATE, {"status": "waiting_for_input"})
            return [first, *[answer async for answer in answers]]

    *_, last = asyncio.run(approve())
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_resubscription_streams_the_rest_until_the_task_is_over(server: A2AServer) -> None:
    task_id = waiting_task(server).id
    results: list[dict[str, Any]] = []
    subscribed = threading.Event()

    def read() -> None:
        for result in sse_results(f"{server.base}/a2a/jsonrpc", "SubscribeToTask", {"id": task_id}):
            results.append(result)
            subscribed.set()

    async def approve() -> None:
        async with sdk_client(agent_url(server)) as client:
            await responses(client, user_message(data({"decision": "approve"}), task_id=task_id))

    reader = threading.Thread(target=read)
    reader.start()
    assert subscribed.wait(timeout=30)  # the snapshot first, while the task waits
    asyncio.run(approve())
    reader.join(timeout=60)
    assert not reader.is_alive()  # the stream ended with the task
    for result in results:
        check_against_spec(result, StreamResponse)
    kinds = [next(iter(result)) for result in results]
    assert kinds[0] == "task" and results[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert kinds[-1] == "statusUpdate" and results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    [answer] = [result["artifactUpdate"]["artifact"] for result in results if "artifactUpdate" in result]
    assert (answer["name"], answer["parts"][0]["text"]) == ("answer.md", "an animal")
    between = {result["statusUpdate"]["status"]["state"] for result in results[1:-1] if "statusUpdate" in result}
    assert "TASK_STATE_WORKING" in between and between <= {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
    seqs = [result[kind]["metadata"]["seq"] for result, kind in zip(results[1:], kinds[1:], strict=True)]
    assert seqs == sorted(seqs)  # each event once, in the log's order


def test_a_task_that_is_over_cannot_be_subscribed_to(server: A2AServer) -> None:
    async def scenario() -> None:
        async with sdk_client(agent_url(server), streaming=True) as client:
            first = await anext(client.send_message(user_message(Part(text="ox?"))))
            cancelled = await client.cancel_task(CancelTaskRequest(id=first.task.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(UnsupportedOperationError, match="CANCELED"):
                await anext(client.subscribe(SubscribeToTaskRequest(id=first.task.id)))

    asyncio.run(scenario())


def approve(server: A2AServer, task_id: str) -> None:
    async def send() -> None:
        async with sdk_client(agent_url(server)) as client:
            await responses(client, user_message(data({"decision": "approve"}), task_id=task_id))

    asyncio.run(send())


class Follower:
    """A client following a stream in a thread of its own, as raw JSON results."""

    def __init__(self, url: str, method: str, params: dict[str, Any], *, version: str | None = "1.0") -> None:
        self.results: list[dict[str, Any]] = []
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, method, params, version))
        self._thread.start()
        assert self._started.wait(timeout=WAIT_SECONDS)  # its first event: it follows

    def _read(self, url: str, method: str, params: dict[str, Any], version: str | None) -> None:
        for result in sse_results(url, method, params, version=version):
            self.results.append(result)
            self._started.set()

    def rest(self) -> list[dict[str, Any]]:
        """Everything it got, once its stream ended."""
        self._thread.join(timeout=WAIT_SECONDS)
        assert not self._thread.is_alive()
        return self.results


def test_a_resubscription_after_its_client_went_away_starts_from_the_task_as_it_now_is(server: A2AServer) -> None:
    async def start_and_go() -> Task:
        async with sdk_client(agent_url(server), streaming=True) as client:
            answers = client.send_message(user_message(Part(text="ox?")))
            first = await anext(answers)
            assert isinstance(answers, AsyncGenerator)
            await answers.aclose()  # the connection closes with the client: the server's stream ends
            return first.task

    task_id = asyncio.run(start_and_go()).id

    async def state() -> int:
        async with sdk_client(agent_url(server)) as client:
            return int((await client.get_task(GetTaskRequest(id=task_id))).status.state)

    while asyncio.run(state()) != TaskState.TASK_STATE_INPUT_REQUIRED:
        time.sleep(0.1)  # the run goes on without anyone following it
    # A client of 0.3 comes back: the task as it now is (what it missed: the wait, and the action)...
    follower = Follower(f"{server.base}/a2a/jsonrpc", "tasks/resubscribe", {"id": task_id}, version=None)
    approve(server, task_id)
    first, *after = follower.rest()
    assert (first["kind"], first["status"]["state"]) == ("task", "input-required")
    asked = first["status"]["message"]["parts"][1]["data"]["action"]
    assert (asked["tool"], asked["arguments"]) == ("lookup", {"word": "ox"})
    # ...then only what came after it: the run to its end, none of what it missed again.
    states = [result["status"]["state"] for result in after if result["kind"] == "status-update"]
    assert states[-1] == "completed" and set(states[:-1]) <= {"submitted", "working"}
    [answer] = [result["artifact"] for result in after if result["kind"] == "artifact-update"]
    assert answer["name"] == "answer.md"


def stuck_subscriber(server: A2AServer, task_id: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A ``SubscribeToTask`` whose client reads the first event (the task:
    the server follows the task for it) and nothing more until told."""
    stuck = socket.socket()
    # A small window: the server's writes stop soon after the client stops reading.
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", server.port))
    stuck.settimeout(WAIT_SECONDS)
    connection = http.client.HTTPConnection("127.0.0.1", server.port)
    connection.sock = stuck
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    connection.request("POST", "/a2a/jsonrpc", json.dumps(body), {"A2A-Version": "1.0"})
    answer = connection.getresponse()
    assert answer.status == 200 and answer.readline().startswith(b"data:")
    return connection, answer


def update_of(result: dict[str, Any]) -> tuple[str, str]:
    """A status update's state and the text of its message ("" for anything else)."""
    status = result.get("statusUpdate", {}).get("status", {})
    parts = status.get("message", {}).get("parts", [{}])
    return status.get("state", ""), parts[0].get("text", "")


def test_a_client_that_stops_reading_is_dropped_while_another_gets_everything(
    server: A2AServer, log: TaskStore
) -> None:
    task_id = waiting_task(server).id
    connection, stuck = stuck_subscriber(server, task_id)
    with contextlib.closing(connection):
        reader = Follower(f"{server.base}/a2a/jsonrpc", "SubscribeToTask", {"id": task_id})
        big = "x" * 48 * 1024  # some 10 MB in all: more than the sockets and the buffers hold
        for start in range(0, 200, 20):
            log.append_events(task_id, [("text", {"delta": big, "n": n}) for n in range(start, start + 20)])
        approve(server, task_id)
        everything = [update_of(result) for result in reader.rest()]
        assert everything.count(("TASK_STATE_WORKING", big)) == 200
        assert everything[-1][0] == "TASK_STATE_COMPLETED"
        # Now the stuck client reads: what was on its way, then the end of a stream that was cut short.
        got = [
            update_of(m.json()["result"]) for m in parse(stuck.read().decode().splitlines()) if isinstance(m, Message)
        ]
    assert 0 < len(got) < everything.count(("TASK_STATE_WORKING", big))
    assert set(got) == {("TASK_STATE_WORKING", big)}
