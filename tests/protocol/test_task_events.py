"""A task's event log as the service writes it (``tasklog``), and as the hub
hands it to subscribers (``hub``), over a real SQLite database. The same
through a real server and an HTTP client is
tests/integration/test_protocol_events.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from registry.executor.events import TextEvent, ToolCallEvent, ToolResultEvent
from registry.protocol.hub import EventHub, Subscription
from registry.protocol.records import TaskEvent
from registry.protocol.store import TaskStore
from registry.protocol.tasklog import EventLogSink, TaskLog
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import REACT
from tests.support.protocol_service import Service, create, step
from tests.support.push_tasks import add_task

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TaskStore]:
    opened = TaskStore(f"sqlite:///{tmp_path / 'tasks.db'}")
    yield opened
    opened.close()


def kinds(entries: list[TaskEvent]) -> list[str]:
    return [entry.kind for entry in entries]


# --- what the service writes ---------------------------------------------------------------


def test_a_task_s_log_tells_its_steps_action_tool_call_answer_and_outcome_in_order(
    repo: LibraryRepo, tmp_path: Path
) -> None:
    library = repo.release("v1.0.0", {"a/react.yml": REACT})
    replies = [{"content": ACTION}, {"when": "^Observation: ox means something$", "content": "Final Answer: an animal"}]
    service = Service(library, tmp_path / "data", replies, require_approval=["lookup"])
    try:
        http = service.http()
        task = create(http, "a/react", inputs={"question": "ox?"})["task_id"]
        first = step(http, task)
        step(http, task, decision="approve")
        log = service.app.extensions["agent_protocol.service"].store.events_after(task, 0)
        worker = service.app.extensions["agent_protocol.service"].engine.worker_id
    finally:
        service.close()
    assert kinds(log) == [
        "state",  # created
        "state",  # queued: the first step's request
        "state",  # running: a worker took it
        "step",  # 1 running
        "tool_call",  # proposed: it waits for a decision
        "action",  # pending
        "step",  # 1 completed
        "state",  # waiting_for_input
        "action",  # approved, by the second step's request
        "state",  # queued
        "state",  # running
        "step",  # 2 running
        "tool_call",
        "tool_result",
        "text",
        "artifact",  # answer.md
        "step",  # 2 completed
        "state",  # completed
        "outcome",
    ]
    assert [entry.seq for entry in log] == list(range(1, len(log) + 1))
    states = [entry.data["status"] for entry in log if entry.kind == "state"]
    assert states == ["created", "queued", "running", "waiting_for_input", "queued", "running", "completed"]
    steps = [entry.data for entry in log if entry.kind == "step"]
    assert [(s["number"], s["status"]) for s in steps] == [
        (1, "running"),
        (1, "completed"),
        (2, "running"),
        (2, "completed"),
    ]
    assert {s["worker"] for s in steps} == {worker}
    assert steps[1]["step_id"] == first["step_id"] and steps[1]["output"] == first["output"]
    assert [entry.data["status"] for entry in log if entry.kind == "action"] == ["pending", "approved"]
    result = next(entry.data for entry in log if entry.kind == "tool_result")
    assert (result["tool"], result["status"], result["output"]) == ("lookup", "ok", "ox means something")
    assert "".join(entry.data["delta"] for entry in log if entry.kind == "text") == "an animal"
    assert log[-1].data == {"outcome": "completed", "output": "an animal", "error": None}


def test_a_sink_joins_text_pieces_into_few_entries_and_keeps_the_order_of_a_tool_call(store: TaskStore) -> None:
    task = add_task(store, "t1")
    with EventLogSink(store, task, "s1", flush_seconds=60, flush_chars=500) as sink:
        for _ in range(1000):
            sink.put(TextEvent("a", "x/y", 1, ""))
        sink.put(ToolCallEvent("x/y", "lookup", {"word": "ox"}, "call-1", 7))
        sink.put(ToolResultEvent("x/y", "lookup", "error", "it broke", 7))
        for _ in range(10):
            sink.put(TextEvent("b", "x/y", 1, ""))
    log = store.events_after(task, 0)
    assert kinds(log) == ["text", "text", "text", "tool_call", "tool_result", "text"]
    # The first piece at once, then pieces gathered up to the size.
    assert [len(entry.data["delta"]) for entry in log if entry.kind == "text"] == [1, 500, 499, 10]
    assert log[4].data["call_id"] == "call-1" and log[4].data["error"] == "error"


def test_a_sink_writes_text_that_gathered_for_its_flush_interval_without_waiting_for_more(store: TaskStore) -> None:
    task = add_task(store, "t1")
    with EventLogSink(store, task, "s1", flush_seconds=0.01, flush_chars=10_000) as sink:
        sink.put(TextEvent("first", "x/y", 1, ""))  # written at once
        sink.put(TextEvent(" second", "x/y", 1, ""))
        while len(store.events_after(task, 0)) < 2:
            pass  # written by the sink's thread, with no more text and no close
        sink.put(TextEvent(" third", "x/y", 1, ""))
    assert [entry.data["delta"] for entry in store.events_after(task, 0)] == ["first", " second", " third"]


class Recorder:
    """A ``LogListener`` that keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[list[tuple[str, int, str, dict[str, Any]]]] = []

    def appended(self, entries: Sequence[TaskEvent]) -> None:
        self.told.append([(entry.task_id, entry.seq, entry.kind, entry.data) for entry in entries])

    def close(self) -> None:
        pass


class Broken(Recorder):
    def appended(self, entries: Sequence[TaskEvent]) -> None:
        raise RuntimeError("a listener's bug")


def test_listeners_are_told_what_the_log_appended_numbered_and_a_broken_one_stops_nothing(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = add_task(store, "t1")
    recorder = Recorder()
    log = TaskLog(store, listeners=[Broken(), recorder])
    task = store.get_task(task_id, owner=None)
    assert task is not None
    log.state(task)
    log.state(replace(task, status="cancelled"), "given up")
    with log.sink(task_id, "s1") as sink:
        sink.put(TextEvent("streamed text is not a change of the task", "x/y", 1, ""))
    assert recorder.told == [
        [("t1", 1, "state", {"status": "created", "reason": None})],
        [("t1", 2, "state", {"status": "cancelled", "reason": "given up"})],
    ]
    assert kinds(store.events_after(task_id, 0)) == ["state", "state", "text"]
    assert [record.getMessage() for record in caplog.records] == ["a listener of task t1's event log failed"] * 2


# --- what the hub hands out ----------------------------------------------------------------


async def drain(subscription: Subscription) -> list[TaskEvent]:
    got = []
    while (event := await subscription.next()) is not None:
        got.append(event)
    return got


def with_hub(store: TaskStore, body: Any, **options: Any) -> Any:
    """Run ``body(hub)`` on an event loop, with the hub's poller running."""

    async def main() -> Any:
        hub = EventHub(store.events_in, poll_seconds=0.01, **options)
        poller = asyncio.ensure_future(hub.run())
        try:
            return await body(hub)
        finally:
            poller.cancel()

    return asyncio.run(main())


def test_subscribers_get_what_follows_their_position_and_end_after_the_outcome(store: TaskStore) -> None:
    task = add_task(store, "t1")
    store.append_events(task, [("state", {"status": "running"}), ("text", {"delta": "a"})])

    async def body(hub: EventHub) -> tuple[list[int], list[int]]:
        from_start, from_two = hub.subscribe(task, 0), hub.subscribe(task, 2)
        store.append_events(task, [("state", {"status": "completed"}), ("outcome", {"outcome": "completed"})])
        return [e.seq for e in await drain(from_start)], [e.seq for e in await drain(from_two)]

    assert with_hub(store, body) == ([1, 2, 3, 4], [3, 4])


def test_a_cancelled_task_s_stream_ends_after_its_last_state(store: TaskStore) -> None:
    task = add_task(store, "t1")

    async def body(hub: EventHub) -> list[str]:
        subscription = hub.subscribe(task, 0)
        store.append_events(task, [("state", {"status": "running"}), ("state", {"status": "cancelled"})])
        return [e.data["status"] for e in await drain(subscription)]

    assert with_hub(store, body) == ["running", "cancelled"]


def test_a_subscriber_of_a_task_already_over_ends_once_it_has_caught_up(store: TaskStore) -> None:
    task = add_task(store, "t1")
    store.append_events(task, [("state", {"status": "running"}), ("step", {"status": "completed"})])

    async def body(hub: EventHub) -> list[int]:
        return [e.seq for e in await drain(hub.subscribe(task, 1, finished=True))]

    assert with_hub(store, body, settle_seconds=0) == [2]


def test_a_subscriber_that_never_reads_is_dropped_and_the_others_get_everything(store: TaskStore) -> None:
    task = add_task(store, "t1")

    async def body(hub: EventHub) -> tuple[bool, list[int], list[int], int]:
        stuck, reader = hub.subscribe(task, 0), hub.subscribe(task, 0)
        got: list[int] = []
        for number in range(1, 41):
            store.append_event(task, "text", {"delta": str(number)})
            while len(got) < number:  # the reader reads each as it comes
                event = await reader.next()
                assert event is not None
                got.append(event.seq)
        store.append_events(task, [("state", {"status": "completed"}), ("outcome", {"outcome": "completed"})])
        got.extend(e.seq for e in await drain(reader))
        return stuck.dropped, [e.seq for e in await drain(stuck)], got, hub.dropped

    dropped, stuck_got, reader_got, count = with_hub(store, body, buffer=4)
    assert dropped and count == 1
    assert stuck_got == []  # its queue was emptied when it was dropped
    assert reader_got == list(range(1, 43))


def test_a_subscriber_far_behind_catches_up_through_a_small_buffer_without_being_dropped(store: TaskStore) -> None:
    task = add_task(store, "t1")
    store.append_events(task, [("text", {"delta": str(n)}) for n in range(250)])
    store.append_events(task, [("state", {"status": "failed"}), ("outcome", {"outcome": "failed"})])

    async def body(hub: EventHub) -> tuple[list[int], bool]:
        subscription = hub.subscribe(task, 0)
        return [e.seq for e in await drain(subscription)], subscription.dropped

    assert with_hub(store, body, buffer=8) == (list(range(1, 253)), False)


def test_one_poll_reads_the_tasks_of_hundreds_of_subscribers(store: TaskStore) -> None:
    tasks = [add_task(store, f"t{n}") for n in range(300)]
    for task in tasks:
        store.append_events(task, [("state", {"status": "cancelled"})])

    async def body(hub: EventHub) -> list[list[str]]:
        subscriptions = [hub.subscribe(task, 0) for task in tasks]
        return [[e.task_id for e in await drain(s)] for s in subscriptions]

    assert with_hub(store, body) == [[task] for task in tasks]
