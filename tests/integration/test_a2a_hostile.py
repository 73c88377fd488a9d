"""Hostile A2A messages against a real server process, sent by the SDK's own
client (or as raw bytes where no client would send them): each refused with
one clear A2A error, nothing created, and the server still answering."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types import GetTaskRequest, Part, TaskState
from a2a.utils.errors import A2AError, InvalidParamsError, InvalidRequestError

from tests.conftest import LibraryRepo
from tests.support.a2a_calls import JSONRPC, REST, data, jsonrpc, responses, sdk_client, user_message
from tests.support.a2a_server import A2AServer
from tests.support.executor_fixtures import REACT

MAX_FILE = 1_000_000
TEN_MB = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[A2AServer]:
    library = LibraryRepo(tmp_path_factory.mktemp("hostile") / "library").release("v1.0.0", {"a/react.yml": REACT})
    data_dir = tmp_path_factory.mktemp("data")
    with A2AServer(library.path, data_dir, [], "--max-artifact-bytes", str(MAX_FILE)) as found:
        yield found


def task_count(server: A2AServer) -> int:
    listed = httpx.get(f"{server.base}/ap/v1/agent/tasks", timeout=30).json()
    count: int = listed["pagination"]["total_items"]
    return count


def refused(
    server: A2AServer, *parts: Part, url: str = "/a2a/agents/a/react", binding: str = JSONRPC, **metadata: Any
) -> A2AError:
    """The error the message to the agent at ``url`` is refused with; no task is created."""
    before = task_count(server)

    async def send() -> None:
        async with sdk_client(f"{server.base}{url}", binding=binding) as client:
            await responses(client, user_message(*parts, **metadata))

    with pytest.raises(A2AError) as caught:
        asyncio.run(send())
    assert task_count(server) == before
    return caught.value


@pytest.mark.parametrize("binding", [JSONRPC, REST])
def test_ten_megabytes_of_parts_are_refused_by_their_size_before_parsing(server: A2AServer, binding: str) -> None:
    error = refused(server, *[Part(text="x" * (TEN_MB // 10))] * 10, binding=binding)
    assert isinstance(error, InvalidRequestError)
    assert "the request body is over" in error.message
    assert httpx.get(f"{server.base}/healthz", timeout=30).status_code == 200


def test_a_body_that_declares_no_length_is_cut_off_at_the_limit(server: A2AServer) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": [{"text": "'
        for _ in range(10):
            yield b"x" * (TEN_MB // 10)
        yield b'"}]}}}'

    answer = httpx.post(
        f"{server.base}/a2a/jsonrpc", content=chunks(), headers={"A2A-Version": "1.0"}, timeout=30
    ).json()
    assert answer["error"]["code"] == -32600 and "the request body is over" in answer["error"]["message"]


def test_parts_within_the_body_but_over_what_a_message_may_carry_are_refused(server: A2AServer) -> None:
    error = refused(server, Part(text="x" * 1_500_000))
    assert isinstance(error, InvalidParamsError)
    assert "the text and data parts hold 1500000 bytes" in error.message


@pytest.mark.parametrize("binding", [JSONRPC, REST])
def test_a_part_of_an_unknown_kind_is_refused(server: A2AServer, binding: str) -> None:
    error = refused(server, Part(text="ox?"), Part(), binding=binding)
    assert isinstance(error, InvalidParamsError) and "a kind this service does not know" in error.message
    # As a client of another version would send it: a member 1.0 does not know.
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"kind": "video", "video": "..."}]}
    answer = jsonrpc(f"{server.base}/a2a/agents/a/react/jsonrpc", "SendMessage", {"message": message})
    assert answer["error"]["code"] == -32602 and "part 0" in answer["error"]["message"]


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd"])
def test_a_file_part_named_out_of_the_tasks_files_is_refused(server: A2AServer, name: str) -> None:
    error = refused(server, Part(text="ox?"), Part(raw=b"root:x:0:0:root:/root:/bin/sh", filename=name))
    assert isinstance(error, InvalidParamsError) and repr(name) in error.message


def test_a_file_over_the_artifact_limit_and_a_file_by_url_are_refused(server: A2AServer) -> None:
    large = refused(server, Part(text="ox?"), Part(raw=b"x" * (MAX_FILE + 1), filename="big.bin"))
    assert isinstance(large, InvalidParamsError) and f"at most {MAX_FILE} bytes" in large.message
    linked = refused(server, Part(text="ox?"), Part(url="http://169.254.169.254/latest/meta-data/"))
    assert isinstance(linked, InvalidParamsError) and "fetches nothing" in linked.message


def test_a_file_within_the_limits_is_the_tasks_own(server: A2AServer) -> None:
    async def send() -> tuple[str, list[tuple[str, bytes]]]:
        async with sdk_client(f"{server.base}/a2a/agents/a/react") as client:
            [answer] = await responses(
                client, user_message(Part(text="ox?"), Part(raw=b"# Notes\n", filename="docs/notes.md"))
            )
            # Stored with the task, before a worker could start it: in the first answer already.
            first = [(a.name, a.parts[0].raw) for a in answer.task.artifacts]
            task = await client.get_task(GetTaskRequest(id=answer.task.id))
            # No reply is scripted: the worker tries the model call again for a while.
            assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
            assert [(a.name, a.parts[0].raw) for a in task.artifacts] == first
            return task.id, first

    task_id, files = asyncio.run(send())
    assert files == [("notes.md", b"# Notes\n")]
    [stored] = httpx.get(f"{server.base}/ap/v1/agent/tasks/{task_id}/artifacts", timeout=30).json()["artifacts"]
    assert (stored["file_name"], stored["relative_path"], stored["agent_created"]) == ("notes.md", "docs", False)


def test_an_unknown_agent_is_refused_naming_it(server: A2AServer) -> None:
    named = refused(server, Part(text="ox?"), url="", agent="a/nope")
    assert isinstance(named, InvalidParamsError) and "cannot run a/nope" in named.message
    # An agent's endpoint that no card leads to.
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "ox?"}]}
    answer = jsonrpc(f"{server.base}/a2a/agents/a/nope/jsonrpc", "SendMessage", {"message": message})
    assert answer["error"]["code"] == -32602 and "cannot run a/nope" in answer["error"]["message"]


def test_an_unknown_metadata_key_is_refused_with_did_you_mean(server: A2AServer) -> None:
    error = refused(server, Part(text="ox?"), relase="v1.0.0")
    assert isinstance(error, InvalidParamsError)
    assert error.message == "the message's metadata has no member 'relase'; did you mean 'release'?"


def test_inputs_the_agent_refuses_are_invalid_params_naming_the_input(server: A2AServer) -> None:
    error = refused(server, data({"question": 3}))
    assert isinstance(error, InvalidParamsError) and "question" in error.message
