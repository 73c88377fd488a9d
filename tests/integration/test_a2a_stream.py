"""A2A's streams over a task's event log, against a real server process: a
streamed message and a resubscription, each ending where the task waits for
its client or is over, read by the SDK's client and as raw server-sent
events checked against the specification's schema.

Until tasks run on background workers, the test plays the worker's part:
it runs the task's step through the Agent Protocol (POST .../steps) and
appends to the task's log what the step did, in the store the server
reads, as ``registry.protocol.events`` says a worker writes it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import Part, StreamResponse, SubscribeToTaskRequest, TaskState
from a2a.utils.errors import UnsupportedOperationError

from registry.a2a.mapping import plain
from registry.protocol import events
from registry.protocol.store import TaskStore
from tests.conftest import LibraryRepo
from tests.support.a2a_calls import sdk_client, sse_results, user_message
from tests.support.a2a_schema import check_against_spec
from tests.support.a2a_server import A2AServer
from tests.support.executor_fixtures import REACT

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'
REPLIES: list[dict[str, Any]] = [
    {"when": "^Observation: ox means something$", "content": "Final Answer: an animal", "repeat": True},
    {"content": ACTION, "repeat": True},
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[A2AServer]:
    library = LibraryRepo(tmp_path_factory.mktemp("stream") / "library").release("v1.0.0", {"a/react.yml": REACT})
    with A2AServer(library.path, data_dir, REPLIES, "--require-approval", "lookup") as found:
        yield found


@pytest.fixture(scope="module")
def log(data_dir: Path) -> Iterator[TaskStore]:
    store = TaskStore(f"sqlite:///{data_dir / 'tasks.db'}")
    yield store
    store.close()


def step(server: A2AServer, task_id: str, **decision: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{server.base}/ap/v1/agent/tasks/{task_id}/steps", json={"additional_input": decision}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def run_to_the_action(server: A2AServer, log: TaskStore, task_id: str) -> None:
    """The first step: the model asks for lookup, which waits for approval."""
    taken = step(server, task_id)
    log.append_event(task_id, events.STATE, {"status": "running"})
    log.append_event(task_id, events.TEXT, {"step_id": taken["step_id"], "agent": "a/react", "delta": "Thought: "})
    log.append_event(task_id, events.ACTION, taken["additional_output"]["action"])
    log.append_event(task_id, events.STATE, {"status": "waiting_for_input"})


def approve_to_the_end(server: A2AServer, log: TaskStore, task_id: str) -> None:
    """The next step: approved, lookup answers, the run ends with its answer."""
    taken = step(server, task_id, decision="approve")
    [answer] = [a for a in taken["artifacts"] if a["file_name"] == "answer.md"]
    log.append_event(task_id, events.STATE, {"status": "running"})
    result = {"step_id": taken["step_id"], "agent": "a/react", "tool": "lookup", "call_id": None}
    log.append_event(task_id, events.TOOL_RESULT, {**result, "output": "ox means something"})
    log.append_event(
        task_id,
        events.ARTIFACT,
        {"artifact_id": answer["artifact_id"], "file_name": "answer.md", "agent_created": True, "size": 9},
    )
    log.append_event(task_id, events.OUTCOME, {"outcome": "completed", "output": "an animal"})
    log.append_event(task_id, events.STATE, {"status": "completed"})


def test_a_streamed_message_follows_the_task_until_it_waits_for_a_decision(server: A2AServer, log: TaskStore) -> None:
    async def follow() -> tuple[StreamResponse, list[StreamResponse]]:
        async with sdk_client(f"{server.base}/a2a/agents/a/react", streaming=True) as client:
            answers = client.send_message(user_message(Part(text="ox?")))
            first = await anext(answers)
            await asyncio.to_thread(run_to_the_action, server, log, first.task.id)
            return first, [answer async for answer in answers]

    first, rest = asyncio.run(follow())
    assert first.task.status.state == TaskState.TASK_STATE_SUBMITTED
    states = [answer.status_update.status.state for answer in rest]
    working, waiting = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_INPUT_REQUIRED
    assert states[-3:] == [working, working, waiting]
    # Before them, at most the entry of the task's creation, where a worker writes one.
    assert set(states[:-3]) <= {TaskState.TASK_STATE_SUBMITTED}
    assert rest[-2].status_update.status.message.parts[0].text == "Thought: "
    asked = plain(rest[-1].status_update.status.message.parts[1].data)["action"]
    assert (asked["tool"], asked["arguments"]) == ("lookup", {"word": "ox"})


def test_a_resubscription_streams_the_rest_until_the_task_is_over(server: A2AServer, log: TaskStore) -> None:
    async def create() -> str:
        async with sdk_client(f"{server.base}/a2a/agents/a/react") as client:
            [answer] = [a async for a in client.send_message(user_message(Part(text="ox?")))]
            return answer.task.id

    task_id = asyncio.run(create())
    run_to_the_action(server, log, task_id)
    results: list[dict[str, Any]] = []
    subscribed = threading.Event()

    def read() -> None:
        for result in sse_results(f"{server.base}/a2a/jsonrpc", "SubscribeToTask", {"id": task_id}):
            results.append(result)
            subscribed.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert subscribed.wait(timeout=30)  # the snapshot first, while the task waits
    approve_to_the_end(server, log, task_id)
    reader.join(timeout=60)
    assert not reader.is_alive()  # the stream ended with the task
    for result in results:
        check_against_spec(result, StreamResponse)
    kinds = [next(iter(result)) for result in results]
    assert kinds == ["task", "statusUpdate", "statusUpdate", "artifactUpdate", "statusUpdate"]
    assert results[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert results[2]["statusUpdate"]["status"]["message"]["parts"][0]["data"]["tool_result"]["tool"] == "lookup"
    answer = results[3]["artifactUpdate"]["artifact"]
    assert (answer["name"], answer["parts"][0]["text"]) == ("answer.md", "an animal")
    assert results[4]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_task_that_is_over_cannot_be_subscribed_to(server: A2AServer) -> None:
    async def scenario() -> None:
        async with sdk_client(f"{server.base}/a2a/agents/a/react", streaming=True) as client:
            first = await anext(client.send_message(user_message(Part(text="ox?"))))
            httpx.post(f"{server.base}/ap/v1/agent/tasks/{first.task.id}/cancel", timeout=30)
            with pytest.raises(UnsupportedOperationError, match="CANCELED"):
                await anext(client.subscribe(SubscribeToTaskRequest(id=first.task.id)))

    asyncio.run(scenario())
