"""A2A's streams (``registry.a2a.stream`` and the streaming operations of
``registry.a2a.handler``) fed by the process's ``EventHub``, over a real
SQLite database: the handler is called as the SDK's routes call it, on one
event loop where the hub's poller runs, while a writer appends to the
task's log from a thread of its own, as a worker would. The same through a
real server and the SDK's client: tests/integration/test_a2a_stream.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.types import SubscribeToTaskRequest, Task, TaskState, TaskStatusUpdateEvent
from sqlalchemy import event
from sqlalchemy.engine import Engine

from registry.a2a.access import CALLER
from registry.a2a.handler import TaskRequestHandler
from registry.a2a.messages import Limits
from registry.a2a.stream import HubEvents
from registry.protocol.hub import EventHub
from registry.protocol.service import Caller, TaskService
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import leaf
from tests.support.protocol_service import Service
from tests.support.push_tasks import add_task

WRITER = "log-writer"
"""The name of the writer's thread: what it reads and writes is the worker's, not the streams'."""
SUBSCRIBERS = 50
WAIT_SECONDS = 30.0
"""How long a step of a test may take (a bound, not a measure)."""
T = TypeVar("T")


@pytest.fixture
def service(repo: LibraryRepo, tmp_path: Path) -> Iterator[TaskService]:
    library = repo.release("v1.0.0", {"s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string")})
    made = Service(library, tmp_path / "data", [], agents_worker=False)
    yield made.app.extensions["agent_protocol.service"]
    made.close()


@pytest.fixture
def task(service: TaskService) -> str:
    """A background task that runs (nothing runs it: the writer writes what it does)."""
    now = datetime.now(timezone.utc)
    return add_task(
        service.store,
        "t1",
        owner=Caller.for_token(None).owner,
        input="ox?",
        agent="s/draft",
        inputs={"question": "ox?"},
        status="running",
        mode="background",
        created_at=now,
        updated_at=now,
    )


@dataclass
class Streams:
    """The handler over the service, its hub (running), and a writer of the task's log."""

    service: TaskService
    hub: EventHub
    handler: TaskRequestHandler
    writer: ThreadPoolExecutor

    def subscribe(self, task_id: str) -> AsyncGenerator[Event, None]:
        """``SubscribeToTask``, as the SDK's routes call it for a client of no token."""
        context = ServerCallContext(state={CALLER: Caller.for_token(None)})
        stream: AsyncGenerator[Event, None] = self.handler.on_subscribe_to_task(
            SubscribeToTaskRequest(id=task_id), context
        )
        return stream

    async def write(self, task_id: str, *texts: str, status: str | None = None) -> None:
        """Append ``texts`` to the log, one entry each, then, with ``status``,
        move the task there as a worker does (its row, then its entries)."""

        def append() -> None:
            for text in texts:
                self.service.store.append_event(task_id, "text", {"delta": text, "agent": "s/draft"})
            if status is not None:
                record = self.service.store.get_task(task_id, owner=None)
                assert record is not None
                moved = replace(record, status=status, updated_at=datetime.now(timezone.utc))
                assert self.service.store.set_task_status(task_id, from_states=[record.status], task=moved)
                entries = [("state", {"status": status}), ("outcome", {"outcome": status})]
                self.service.store.append_events(task_id, entries)

        await asyncio.get_running_loop().run_in_executor(self.writer, append)


def streaming(service: TaskService, body: Callable[[Streams], Awaitable[T]], **hub_options: Any) -> T:
    """Run ``body`` on an event loop where a hub over ``service``'s store polls."""

    async def main() -> T:
        hub = EventHub(service.store.events_in, poll_seconds=0.01, **hub_options)
        handler = TaskRequestHandler(service, events=HubEvents(hub, service.store), limits=Limits(4096, 4096))
        poller = asyncio.ensure_future(hub.run())
        try:
            with ThreadPoolExecutor(1, thread_name_prefix=WRITER) as writer:
                return await body(Streams(service, hub, handler, writer))
        finally:
            poller.cancel()

    return asyncio.run(main())


@contextmanager
def log_reads() -> Iterator[list[str]]:
    """The statements that read a ``task_events`` table, in any of the
    process's engines, from any thread but the writer's (SQLAlchemy's events)."""
    statements: list[str] = []

    def seen(_connection: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        reads = statement.lstrip().upper().startswith("SELECT") and "task_events" in statement
        if reads and not threading.current_thread().name.startswith(WRITER):
            statements.append(statement)

    event.listen(Engine, "before_cursor_execute", seen)
    try:
        yield statements
    finally:
        event.remove(Engine, "before_cursor_execute", seen)


async def rest(stream: AsyncGenerator[Event, None]) -> list[Event]:
    return [item async for item in stream]


async def until(check: Callable[[], bool]) -> None:
    """Once ``check()`` holds (its bound: WAIT_SECONDS)."""

    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(wait(), WAIT_SECONDS)


def said(events: list[Event]) -> list[tuple[str, str]]:
    """Each status update as its state and the text of its message."""
    found = []
    for update in events:
        assert isinstance(update, TaskStatusUpdateEvent)
        text = update.status.message.parts[0].text if update.status.message.parts else ""
        found.append((TaskState.Name(update.status.state), text))
    return found


def test_fifty_streams_of_one_task_are_fed_by_the_hub_s_one_query_a_poll(service: TaskService, task: str) -> None:
    async def body(streams: Streams) -> tuple[list[Event], list[list[Event]], int]:
        subscribed = [streams.subscribe(task) for _ in range(SUBSCRIBERS)]
        firsts = [await anext(stream) for stream in subscribed]  # the task as it is, then they follow
        readers = [asyncio.ensure_future(rest(stream)) for stream in subscribed]
        await until(lambda: streams.hub.subscribers == SUBSCRIBERS)
        await streams.write(task, *(f"piece {n}" for n in range(20)), status="completed")
        followed = await asyncio.gather(*readers)
        return firsts, followed, streams.hub.polls

    with log_reads() as reads:
        firsts, followed, polls = streaming(service, body)
    assert all(isinstance(first, Task) and first.status.state == TaskState.TASK_STATE_WORKING for first in firsts)
    expected = [*(("TASK_STATE_WORKING", f"piece {n}") for n in range(20)), ("TASK_STATE_COMPLETED", "")]
    assert all(said(events) == expected for events in followed)
    # Each stream read where the log stood when it came (one look each);
    # everything after was the hub's: one query a poll for all fifty.
    positions = [statement for statement in reads if "max(" in statement]
    polled = [statement for statement in reads if "json_each" in statement]
    assert len(positions) == SUBSCRIBERS and len(positions) + len(polled) == len(reads)
    assert 0 < len(polled) <= polls


def test_a_stream_whose_client_goes_is_unsubscribed_and_a_new_one_starts_from_the_task_as_it_is(
    service: TaskService, task: str
) -> None:
    async def body(streams: Streams) -> tuple[list[tuple[str, str]], int, Event, list[Event]]:
        first = streams.subscribe(task)
        got = [await anext(first)]
        await streams.write(task, "seen")
        got.append(await anext(first))
        following = streams.hub.subscribers
        await first.aclose()  # what the SDK's route does when the client disconnects
        assert streams.hub.subscribers == 0
        await streams.write(task, "missed")
        again = streams.subscribe(task)
        snapshot = await anext(again)
        reader = asyncio.ensure_future(rest(again))
        await until(lambda: streams.hub.subscribers == 1)
        await streams.write(task, "new", status="completed")
        return said(got[1:]), following, snapshot, await reader

    seen, following, snapshot, after = streaming(service, body)
    assert seen == [("TASK_STATE_WORKING", "seen")] and following == 1
    # A2A's resubscription: the task as it is now, then what comes after it.
    assert isinstance(snapshot, Task) and snapshot.id == task and snapshot.status.state == TaskState.TASK_STATE_WORKING
    assert said(after) == [("TASK_STATE_WORKING", "new"), ("TASK_STATE_COMPLETED", "")]


def test_a_stream_never_read_is_dropped_and_ends_while_another_gets_everything(service: TaskService, task: str) -> None:
    async def body(streams: Streams) -> tuple[list[Event], list[Event], int, int]:
        stuck, reading = streams.subscribe(task), streams.subscribe(task)
        await anext(stuck)
        await anext(reading)
        # The stuck one takes its first entry (so it is subscribed), and no more.
        taken = asyncio.ensure_future(anext(stuck))
        reader = asyncio.ensure_future(rest(reading))
        await until(lambda: streams.hub.subscribers == 2)
        await streams.write(task, *(f"piece {n}" for n in range(40)), status="completed")
        everything = await reader
        return [await taken, *await rest(stuck)], everything, streams.hub.dropped, streams.hub.subscribers

    stuck_got, reader_got, dropped, left = streaming(service, body, buffer=4)
    assert dropped == 1 and left == 0
    assert said(reader_got) == [
        *(("TASK_STATE_WORKING", f"piece {n}") for n in range(40)),
        ("TASK_STATE_COMPLETED", ""),
    ]
    # What was in its buffer was let go with it: its stream ended early, without the end of the task.
    assert said(stuck_got) == [("TASK_STATE_WORKING", "piece 0")]
