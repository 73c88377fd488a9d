"""Ending a streamed run early, across processes: ``Executor.astream`` of a
small agent against the scripted server playing llama.cpp (its own process,
through the official SDK), streaming slowly. Closing the stream, cancelling
the task that reads it, or the call's timeout closes the connection: the
server's log says the client disconnected mid-reply, and the next request,
from the same executor, is served at once (the server is not generating
for nobody, and no call waits for the one llama.cpp slot the adapter
keeps). Order of events and log lines only, never durations."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest

from registry.executor import COMPLETED, FAILED, Executor, OpenAIChatModel
from registry.executor.events import Event, OutcomeEvent, TextEvent
from registry.executor.executor import RunResult
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import leaf, registry_client
from tests.support.openai_server import ScriptedModelServer

ANSWER = leaf("the answerer", "Answer: {{ question }}", question="string")
IMPATIENT = ANSWER + "params: {timeout: 1}\n"
PIECES = 3000
# A minute of events 20 ms apart, unless the client leaves: a server that
# went on generating would not have ended it within the wait for its end.
SLOW = {"content": "x" * PIECES, "chunk_chars": 1, "delay_between": 0.02}
NEXT = {"content": "The next answer."}
# The log's lines in the order a closed stream gives: the first reply ends
# before the next request comes, and the next one is answered whole.
SERVED_AFTER_THE_DISCONNECT = [(1, "request"), (1, "disconnected"), (2, "request"), (2, "finished")]


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    repo.release("v1.0.0", {"s/answer.yml": ANSWER, "s/impatient.yml": IMPATIENT})
    return repo


def _log(server: ScriptedModelServer) -> list[tuple[int, str]]:
    """The server's log, a (request, line) pair each: ``request`` when one
    came, else how its answer ended."""
    return [(entry["request"], entry.get("event", "request")) for entry in server.entries()]


def _scenario(
    library: LibraryRepo,
    server: ScriptedModelServer,
    agent: str,
    end_early: Callable[[AsyncGenerator[Event, None]], Any],
) -> tuple[list[Event], list[tuple[str, int]], RunResult]:
    """Stream ``agent``, end it with ``end_early`` (given the stream; it
    returns the events read), wait until the server has logged how the
    reply ended, then run ``agent`` again on the same executor."""

    async def scenario() -> tuple[list[Event], list[tuple[str, int]], RunResult]:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", server="llama.cpp", max_retries=0)
        async with Executor(model=model, registry=client) as executor:
            read = await end_early(executor.astream(agent, {"question": "q"}))
            ended = await asyncio.to_thread(server.wait_for_endings, 1)
            after = await executor.arun(agent, {"question": "q"})
        return read, ended, after

    with registry_client(library.path) as client:
        return asyncio.run(scenario())


def _texts(events: list[Event]) -> list[str]:
    return [event.text for event in events if isinstance(event, TextEvent)]


async def _close_after_two_pieces(events: AsyncGenerator[Event, None]) -> list[Event]:
    read: list[Event] = []
    while len(_texts(read)) < 2:
        read.append(await anext(events))
    await events.aclose()
    return read


async def _cancel_the_reader_after_three_pieces(events: AsyncGenerator[Event, None]) -> list[Event]:
    read: list[Event] = []
    three = asyncio.Event()

    async def reader() -> None:
        async for event in events:
            read.append(event)
            if len(_texts(read)) == 3:
                three.set()

    task = asyncio.ensure_future(reader())
    await three.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return read


async def _everything(events: AsyncGenerator[Event, None]) -> list[Event]:
    return [event async for event in events]


def test_closing_the_stream_mid_reply_disconnects_and_the_next_request_is_served(
    library: LibraryRepo, tmp_path: Path
) -> None:
    with ScriptedModelServer([SLOW, NEXT], tmp_path, flavor="llama.cpp") as server:
        read, ended, after = _scenario(library, server, "s/answer", _close_after_two_pieces)
        log = _log(server)
    assert _texts(read) == ["x", "x"]
    assert not any(isinstance(event, OutcomeEvent) for event in read)
    assert [how for how, _ in ended] == ["disconnected"] and ended[0][1] < PIECES
    assert (after.outcome, after.output) == (COMPLETED, NEXT["content"])
    assert log == SERVED_AFTER_THE_DISCONNECT


def test_cancelling_the_task_reading_the_stream_disconnects_and_the_next_request_is_served(
    library: LibraryRepo, tmp_path: Path
) -> None:
    with ScriptedModelServer([SLOW, NEXT], tmp_path, flavor="llama.cpp") as server:
        read, ended, after = _scenario(library, server, "s/answer", _cancel_the_reader_after_three_pieces)
        log = _log(server)
    assert _texts(read)[:3] == ["x", "x", "x"]
    assert not any(isinstance(event, OutcomeEvent) for event in read)
    assert [how for how, _ in ended] == ["disconnected"] and ended[0][1] < PIECES
    assert (after.outcome, after.output) == (COMPLETED, NEXT["content"])
    assert log == SERVED_AFTER_THE_DISCONNECT


def test_a_call_timeout_mid_stream_disconnects_and_the_next_request_is_served(
    library: LibraryRepo, tmp_path: Path
) -> None:
    with ScriptedModelServer([SLOW, NEXT], tmp_path, flavor="llama.cpp") as server:
        read, ended, after = _scenario(library, server, "s/impatient", _everything)
        log = _log(server)
    # Some text, then the call's timeout ends the run, which says so last.
    assert _texts(read) and set("".join(_texts(read))) == {"x"}
    outcome = read[-1]
    assert isinstance(outcome, OutcomeEvent) and outcome.result.outcome == FAILED
    assert "did not answer within 1 s" in (outcome.result.error or "")
    assert [how for how, _ in ended] == ["disconnected"] and ended[0][1] < PIECES
    assert (after.outcome, after.output) == (COMPLETED, NEXT["content"])
    assert log == SERVED_AFTER_THE_DISCONNECT
