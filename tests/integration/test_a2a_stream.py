"""A2A's streams over a task's event log, against a real server process
whose own worker runs the tasks: a streamed message and a streamed decision,
each followed until the task waits for its client or is over, and a
resubscription, read by the SDK's client and as raw server-sent events
checked against the specification's schema. Nothing steps the tasks; one
test writes a log entry as a worker would, late."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types import CancelTaskRequest, Part, StreamResponse, SubscribeToTaskRequest, Task, TaskState
from a2a.utils.errors import UnsupportedOperationError

from registry.a2a.mapping import plain
from registry.protocol import events
from registry.protocol.store import TaskStore
from tests.conftest import LibraryRepo
from tests.support.a2a_calls import data, responses, sdk_client, sse_results, user_message
from tests.support.a2a_schema import check_against_spec
from tests.support.a2a_server import A2AServer
from tests.support.executor_fixtures import REACT

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'
# Each reply a moment late, so that a stream opened with the task, or with
# a decision, finds it still on its way (and so has something to follow).
REPLIES: list[dict[str, Any]] = [
    {"when": "^Observation: ox means something$", "content": "Final Answer: an animal", "repeat": True, "delay": 1},
    {"content": ACTION, "repeat": True, "delay": 1},
]
MOVING = {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[A2AServer]:
    library = LibraryRepo(tmp_path_factory.mktemp("stream") / "library").release("v1.0.0", {"a/react.yml": REACT})
    with A2AServer(library.path, data_dir, REPLIES, "--require-approval", "lookup") as found:
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


def test_a_streamed_decision_follows_the_run_to_its_end(server: A2AServer) -> None:
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
