"""Ending a streamed run early: the reader closing the stream, or
cancelling the task reading it, closes the model's stream and ends the run;
a call's timeout mid-stream ends the call as a timeout does in ``run``."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from types import FrameType
from typing import Any

import pytest

from registry.executor import EXHAUSTED, FAILED, Executor
from registry.executor.events import Event, OutcomeEvent, TextEvent
from registry.executor.scripted import ScriptedModel, StreamCounts
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for, leaf, registry_client

LONG = " ".join(f"word{number}" for number in range(200))
SLOW = {"content": LONG, "stream_delay": 0.02}
ANSWER = leaf("the answerer", "Answer: {{ question }}", question="string")
IMPATIENT = ANSWER + "params: {timeout: 0.3}\n"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> LibraryRepo:
    repo = LibraryRepo(tmp_path_factory.mktemp("cancel") / "library")
    repo.release("v1.0.0", {"support/answer.yml": ANSWER, "support/impatient.yml": IMPATIENT})
    return repo


def test_closing_the_stream_mid_reply_closes_the_models_stream(library: LibraryRepo) -> None:
    model = ScriptedModel.from_replies([SLOW, {"content": "again"}], source="the test")

    async def scenario() -> tuple[list[Event], StreamCounts, str | None]:
        async with Executor(model=model, registry=client) as executor:
            events = executor.astream("support/answer", {"question": "q"})
            read = [await anext(events), await anext(events)]
            await events.aclose()
            counts = model.stream_counts()
            # The executor is free again: the next run runs.
            after = await executor.arun("support/answer", {"question": "q"})
            return read, counts, after.output

    with registry_client(library.path) as client:
        read, counts, after = asyncio.run(scenario())
    assert [event.text for event in read if isinstance(event, TextEvent)] == ["word0 ", "word1 "]
    assert counts == StreamCounts(opened=1, ended=1, closed_early=1)
    assert after == "again"


def test_cancelling_the_task_that_reads_the_stream_closes_the_models_stream(library: LibraryRepo) -> None:
    model = ScriptedModel.from_replies([SLOW], source="the test")

    async def scenario() -> tuple[list[Event], StreamCounts]:
        read: list[Event] = []
        first_text = asyncio.Event()

        async def reader(events: AsyncIterator[Event]) -> None:
            async for event in events:
                read.append(event)
                first_text.set()

        async with Executor(model=model, registry=client) as executor:
            task = asyncio.ensure_future(reader(executor.astream("support/answer", {"question": "q"})))
            await first_text.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return read, model.stream_counts()

    with registry_client(library.path) as client:
        read, counts = asyncio.run(scenario())
    assert counts == StreamCounts(opened=1, ended=1, closed_early=1)
    assert read and not any(isinstance(event, OutcomeEvent) for event in read)


def test_leaving_a_sync_stream_early_ends_the_run_before_it_returns(library: LibraryRepo) -> None:
    model = ScriptedModel.from_replies([SLOW], source="the test")
    with executor_for(library.path, model) as executor:
        for event in executor.stream("support/answer", {"question": "q"}):
            if isinstance(event, TextEvent):
                break
        assert model.stream_counts() == StreamCounts(opened=1, ended=1, closed_early=1)


class Interrupted(Exception):
    """What a signal raises in the thread reading a stream, as Ctrl-C raises KeyboardInterrupt."""


def test_a_signal_while_a_sync_stream_waits_for_an_event_ends_the_run(library: LibraryRepo) -> None:
    # The first piece comes after 5 s; the signal, after 0.3 s, finds the
    # reader waiting for it, with a read in progress on the executor's loop.
    model = ScriptedModel.from_replies([{"content": LONG, "delay": 5}], source="the test")

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with executor_for(library.path, model) as executor:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(Interrupted):
                list(executor.stream("support/answer", {"question": "q"}))
            assert model.stream_counts() == StreamCounts(opened=1, ended=1, closed_early=1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _streamed(library: LibraryRepo, replies: list[Any], agent: str, **options: Any) -> list[Event]:
    with executor_for(library.path, replies, **options) as executor:
        return list(executor.stream(agent, {"question": "q"}))


def test_a_call_timeout_mid_stream_fails_the_run_as_run_does(library: LibraryRepo) -> None:
    replies = [{"content": LONG, "stream_delay": 0.1}]
    events = _streamed(library, replies, "support/impatient")
    last = events[-1]
    assert isinstance(last, OutcomeEvent)
    pieces = [event.text for event in events if isinstance(event, TextEvent)]
    assert pieces and "".join(pieces) != LONG  # some text came, then the call timed out
    with executor_for(library.path, replies) as executor:
        expected = executor.run("support/impatient", {"question": "q"})
    assert (last.result.outcome, last.result.error) == (FAILED, expected.error)
    assert "did not answer within 0.3 s" in (expected.error or "")
    assert (last.result.llm_calls, last.result.llm_replies) == (1, 0)


def test_the_run_time_limit_mid_stream_exhausts_the_run(library: LibraryRepo) -> None:
    # The run's 2 s start before its model call, so that the first pieces come within them.
    events = _streamed(library, [{"content": LONG, "stream_delay": 0.1}], "support/answer", run_timeout=2)
    last = events[-1]
    assert isinstance(last, OutcomeEvent)
    assert last.result.outcome == EXHAUSTED and "time limit" in (last.result.error or "")
    assert any(isinstance(event, TextEvent) for event in events)
