"""The task store (registry.protocol.store) on SQLite and on a real
PostgreSQL: records round trip, claims race, migrations run once however
many processes start, and failures come out as the registry's errors."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from registry.errors import ConfigurationError, StoreError
from registry.protocol.database import MIGRATIONS
from registry.protocol.records import ActionRecord, ArtifactRecord, Decision, StepEnd, StepRecord, TaskRecord
from registry.protocol.store import DecisionConflict, TaskStore
from registry.protocol.tables import METADATA
from tests.support.ports import free_port
from tests.support.postgres_server import postgres_server  # noqa: F401  (a fixture: pytest finds it here)

REPOSITORY = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 5, 9, 12, 0, tzinfo=timezone.utc)
RESUMABLE = ("created", "waiting_for_input")

T = TypeVar("T")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a new, empty database: a SQLite file, or one on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tasks.db'}"
    return str(request.getfixturevalue("postgres_server").create_database())


@pytest.fixture
def store(url: str) -> Iterator[TaskStore]:
    opened = TaskStore(url)
    yield opened
    opened.close()


def task(task_id: str = "t1", *, owner: str = "alice", at: datetime = T0, status: str = "created") -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        owner=owner,
        input="summarise the ticket",
        additional_input={"ticket": {"id": 7, "tags": ["a", "b"]}},
        agent="support/triage",
        release_requested="^1.0",
        release_tag="v1.2.0",
        release_commit="0" * 40,
        digest="sha256:" + "ab" * 32,
        inputs={"ticket": "printer on fire", "count": 2, "nested": {"ok": True, "none": None}},
        status=status,
        created_at=at,
        updated_at=at,
    )


def step(step_id: str = "s1", task_id: str = "t1", *, at: datetime = T0) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        task_id=task_id,
        number=0,
        status="created",
        created_at=at,
        input="go on",
        additional_input={"approve": True},
    )


def action(action_id: str, *, at: datetime = T0, status: str = "pending") -> ActionRecord:
    return ActionRecord(
        action_id=action_id,
        task_id="t1",
        step_id="s1",
        key=f"journal/{action_id}",
        agent="support/triage",
        tool="send_email",
        arguments={"to": "ops@example.com", "body": "é ✓"},
        thought="the customer asked",
        status=status,
        created_at=at,
    )


def artifact(artifact_id: str, data: bytes, *, at: datetime = T0) -> ArtifactRecord:
    return ArtifactRecord(
        artifact_id=artifact_id,
        task_id="t1",
        agent_created=True,
        file_name=f"{artifact_id}.bin",
        relative_path="out/",
        content_type="application/octet-stream",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        created_at=at,
        step_id="s1",
    )


def at_once(count: int, work: Callable[[], T]) -> list[T]:
    """``work()`` in ``count`` threads released together; their results (or the first exception)."""
    barrier = threading.Barrier(count)

    def run() -> T:
        barrier.wait()
        return work()

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(run) for _ in range(count)]
        return [future.result() for future in futures]


def revision_of(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config).get_current_head()


# Tasks


def test_a_task_reads_back_as_written(store: TaskStore) -> None:
    written = task()
    store.create_task(written)
    assert store.get_task("t1", owner="alice") == written
    assert store.get_task("t1", owner=None) == written


def test_timestamps_read_back_as_the_same_instant_in_utc(store: TaskStore) -> None:
    paris = timezone(timedelta(hours=2))
    store.create_task(task(at=datetime(2026, 5, 9, 14, 30, 15, 123456, tzinfo=paris)))
    read = store.get_task("t1", owner=None)
    assert read is not None
    assert read.created_at == datetime(2026, 5, 9, 12, 30, 15, 123456, tzinfo=timezone.utc)
    assert read.created_at.tzinfo == timezone.utc


def test_a_task_of_another_owner_or_none_at_all_is_not_found(store: TaskStore) -> None:
    store.create_task(task())
    assert store.get_task("t1", owner="mallory") is None
    assert store.get_task("nope", owner=None) is None


def test_tasks_are_listed_oldest_first_by_owner_a_page_at_a_time_with_the_total(store: TaskStore) -> None:
    # Created out of order, and with two at the same instant: the order still holds.
    for n in (3, 0, 4, 1, 2):
        store.create_task(task(f"a{n}", owner="alice", at=T0 + timedelta(seconds=n)))
    store.create_task(task("a5", owner="alice", at=T0 + timedelta(seconds=4)))
    store.create_task(task("b0", owner="bob", at=T0 + timedelta(seconds=2, milliseconds=500)))

    page, total = store.list_tasks(owner="alice", offset=0, limit=4)
    assert ([t.task_id for t in page], total) == (["a0", "a1", "a2", "a3"], 6)
    page, total = store.list_tasks(owner="alice", offset=4, limit=4)
    assert ([t.task_id for t in page], total) == (["a4", "a5"], 6)
    page, total = store.list_tasks(owner=None, offset=2, limit=2)
    assert ([t.task_id for t in page], total) == (["a2", "b0"], 7)
    assert store.list_tasks(owner="carol", offset=0, limit=10) == ([], 0)


# Submitting segments and running steps


class Queue:
    """What the service's ``enqueue`` would put on the run queue: here, the
    segments handed over inside the store's transaction, and the
    connection's dialect (the same database as the store's)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.segments: list[tuple[str, int, str]] = []
        self.fail = fail

    def __call__(self, connection: sa.engine.Connection, queued: TaskRecord) -> None:
        if self.fail:
            raise StoreError("the run queue refused the segment")
        self.segments.append((queued.task_id, queued.segments, queued.status))


def submit(
    store: TaskStore, queue: Queue, *, segment: int = 1, owner: str | None = "alice", **extra: object
) -> TaskRecord | None:
    return store.submit(
        "t1", owner=owner, from_states=RESUMABLE, segment=segment, at=T0 + timedelta(seconds=1), enqueue=queue,
        **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def test_submitting_queues_the_task_its_step_and_its_segment_together(store: TaskStore) -> None:
    store.create_task(task())
    queue = Queue()
    queued = submit(store, queue, step=step())
    assert queued == replace(task(), status="queued", segments=1, steps=1, updated_at=T0 + timedelta(seconds=1))
    assert queue.segments == [("t1", 1, "queued")]
    assert store.get_step("t1", "s1") == replace(step(), number=1)


def test_a_segment_the_queue_refuses_leaves_the_task_as_it_was(store: TaskStore) -> None:
    store.create_task(task())
    with pytest.raises(StoreError):
        submit(store, Queue(fail=True), step=step())
    assert store.get_task("t1", owner=None) == task()
    assert store.list_steps("t1", offset=0, limit=10) == ([], 0)


def test_submitting_a_task_in_another_state_segment_or_of_another_owner_changes_nothing(store: TaskStore) -> None:
    store.create_task(task())
    queue = Queue()
    assert submit(store, queue, owner="mallory") is None
    assert submit(store, queue, segment=2) is None
    assert store.submit("t1", owner=None, from_states=("waiting_for_input",), segment=1, at=T0, enqueue=queue) is None
    assert store.get_task("t1", owner=None) == task() and queue.segments == []


def test_of_eight_concurrent_submits_of_a_segment_exactly_one_wins(store: TaskStore) -> None:
    store.create_task(task())
    ids = iter(range(8))
    lock = threading.Lock()
    queue = Queue()

    def one() -> TaskRecord | None:
        with lock:
            step_id = f"s{next(ids)}"
        return submit(store, queue, step=step(step_id))

    won = [result for result in at_once(8, one) if result is not None]
    assert len(won) == 1 and won[0].steps == 1 and queue.segments == [("t1", 1, "queued")]
    assert store.list_steps("t1", offset=0, limit=10)[1] == 1


def test_concurrent_submits_through_separate_stores_also_let_exactly_one_win(url: str) -> None:
    # Separate stores: separate engines, as servers (or processes) have.
    stores = [TaskStore(url) for _ in range(4)]
    try:
        stores[0].create_task(task())
        ids = iter(range(4))
        lock = threading.Lock()

        def one() -> TaskRecord | None:
            with lock:
                n = next(ids)
            return submit(stores[n], Queue(), owner=None, step=step(f"s{n}"))

        assert sum(result is not None for result in at_once(4, one)) == 1
        assert stores[0].list_steps("t1", offset=0, limit=10)[1] == 1
    finally:
        for opened in stores:
            opened.close()


def test_a_status_changes_only_from_the_states_given(store: TaskStore) -> None:
    store.create_task(task())
    cancelled = replace(task(), status="cancelled", updated_at=T0 + timedelta(seconds=3))
    assert store.set_task_status("t1", from_states=("running",), task=cancelled) is False
    assert store.get_task("t1", owner=None) == task()
    assert store.set_task_status("t1", from_states=RESUMABLE, task=cancelled) is True
    assert store.get_task("t1", owner=None) == cancelled
    assert store.set_task_status("nope", from_states=RESUMABLE, task=cancelled) is False
    assert submit(store, Queue()) is None


def test_a_worker_starts_the_submitted_step_and_another_takes_it_over(store: TaskStore) -> None:
    store.create_task(task())
    submit(store, Queue(), step=step())
    begun = store.begin_step(step(), worker="w1", at=T0 + timedelta(seconds=2))
    assert begun is not None
    started, running = begun.task, begun.step
    assert (started.status, started.running_step_id, started.steps) == ("running", "s1", 1)
    assert (running.status, running.worker, running.number, running.input) == ("running", "w1", 1, "go on")
    # w1 died: w2 takes the same step over, numbered as it was.
    again = store.begin_step(step(), worker="w2", at=T0 + timedelta(seconds=3))
    assert again is not None and (again.step.worker, again.step.number, again.task.steps) == ("w2", 1, 1)


def test_a_background_step_is_stored_by_the_worker_that_starts_it(store: TaskStore) -> None:
    store.create_task(replace(task(), status="queued", mode="background", segments=1))
    begun = store.begin_step(replace(step("b1"), input=None, additional_input={}), worker="w1", at=T0)
    assert begun is not None and (begun.task.steps, begun.step.number, begun.step.status) == (1, 1, "running")


def test_no_step_starts_on_a_cancelled_task(store: TaskStore) -> None:
    store.create_task(replace(task(), status="cancelled"))
    assert store.begin_step(step(), worker="w1", at=T0) is None
    assert store.list_steps("t1", offset=0, limit=10) == ([], 0)


# Steps


def finished(claimed: StepRecord, *, at: datetime, output: str) -> StepRecord:
    return replace(
        claimed,
        status="completed",
        name="draft",
        output=output,
        additional_output={"tokens": 12, "none": None},
        is_last=False,
        finished_at=at,
    )


def started(store: TaskStore, step_id: str = "s1", *, segment: int = 1) -> tuple[TaskRecord, StepRecord]:
    submit(store, Queue(), segment=segment, step=step(step_id))
    begun = store.begin_step(step(step_id), worker="w1", at=T0 + timedelta(seconds=segment))
    assert begun is not None
    return begun.task, begun.step


def ended(done: StepRecord, after: TaskRecord) -> StepEnd:
    """What ``done`` leaves (``after``), with nothing else: no file, action or log entry."""
    cancelled = replace(done, status="failed", output=None, additional_output={"error": "cancelled"}, is_last=True)
    return StepEnd(step=done, task=after, entries=(), after_cancel=cancelled, entries_after_cancel=())


def test_finishing_a_step_writes_the_step_and_the_task_and_frees_it(store: TaskStore) -> None:
    store.create_task(task())
    running_task, running = started(store)
    done = finished(running, at=T0 + timedelta(seconds=5), output="drafted")
    after = replace(running_task, status="waiting_for_input", output="drafted", updated_at=T0 + timedelta(seconds=5))
    assert store.finish_step(ended(done, after)) is True
    assert store.get_step("t1", "s1") == done
    assert store.get_task("t1", owner=None) == replace(after, running_step_id=None)
    # Its worker died after writing it: the one taking over finds it over.
    begun = store.begin_step(step(), worker="w2", at=T0)
    assert begun is not None and begun.step == done


def test_a_task_cancelled_while_its_step_ran_stays_cancelled(store: TaskStore) -> None:
    store.create_task(task())
    running_task, running = started(store)
    cancelled = replace(running_task, status="cancelled")
    assert store.set_task_status("t1", from_states=("running",), task=cancelled)
    done = finished(running, at=T0 + timedelta(seconds=5), output="late")
    end = ended(done, replace(running_task, status="completed", outcome="completed"))
    assert store.finish_step(end) is False
    assert store.get_step("t1", "s1") == end.after_cancel
    after = store.get_task("t1", owner=None)
    assert after is not None and (after.status, after.running_step_id) == ("cancelled", None)


def test_steps_are_numbered_and_listed_in_order(store: TaskStore) -> None:
    store.create_task(task())
    for n in range(1, 4):
        running_task, running = started(store, f"s{n}", segment=n)
        assert running_task.steps == n
        end = T0 + timedelta(seconds=n)
        store.finish_step(
            ended(
                finished(running, at=end, output=str(n)),
                replace(running_task, status="waiting_for_input", updated_at=end),
            )
        )
    page, total = store.list_steps("t1", offset=1, limit=5)
    assert ([(s.step_id, s.number, s.output) for s in page], total) == ([("s2", 2, "2"), ("s3", 3, "3")], 3)
    assert store.get_step("other", "s1") is None


# Actions


def decision(status: str, *, step_id: str, **extra: object) -> Decision:
    choice = {"approved": "approve", "rejected": "reject", "edited": "edit"}[status]
    return Decision(task_id="t1", action_id="a1", key="journal/a1", status=status, choice=choice, step_id=step_id,
                    **extra)  # type: ignore[arg-type]  # fmt: skip


def test_an_action_is_decided_once_with_the_segment_that_goes_on_with_it(store: TaskStore) -> None:
    store.create_task(replace(task(), status="waiting_for_input"))
    assert store.add_action(action("a1", at=T0 + timedelta(seconds=1)))
    assert not store.add_action(action("a1", at=T0 + timedelta(seconds=1)))  # proposed again by a worker taking over
    assert store.pending_action("t1") == action("a1", at=T0 + timedelta(seconds=1))

    edited = {"to": "oncall@example.com", "body": "edited"}
    queue = Queue()
    chosen = decision("edited", step_id="s2", reason="wrong team", edited_arguments=edited)
    assert submit(store, queue, decision=chosen) is not None
    assert store.journal("t1")["journal/a1"] == {"decision": "edit", "reason": "wrong team", "arguments": edited}
    # A second decision on it loses, and changes nothing, its segment included.
    store.set_task_status("t1", from_states=("queued",), task=replace(task(), status="waiting_for_input"))
    with pytest.raises(DecisionConflict):
        submit(store, queue, segment=2, decision=decision("rejected", step_id="s3"))
    assert queue.segments == [("t1", 1, "queued")]
    assert store.pending_action("t1") is None
    assert store.list_actions("t1") == [
        replace(
            action("a1", at=T0 + timedelta(seconds=1)),
            status="edited",
            decided_by_step_id="s2",
            reason="wrong team",
            edited_arguments=edited,
        )
    ]


def test_the_oldest_pending_action_comes_first_and_actions_list_oldest_first(store: TaskStore) -> None:
    store.create_task(task())
    store.add_action(action("late", at=T0 + timedelta(seconds=2)))
    store.add_action(action("early", at=T0 + timedelta(seconds=1)))
    store.add_action(action("done", at=T0, status="approved"))
    pending = store.pending_action("t1")
    assert pending is not None and pending.action_id == "early"
    assert [a.action_id for a in store.list_actions("t1")] == ["done", "early", "late"]
    assert store.list_actions("other") == []


# Artifacts


def test_artifacts_round_trip_their_bytes_exactly(store: TaskStore) -> None:
    store.create_task(task())
    contents = {
        "empty": b"",
        "binary": bytes(range(256)) * 4 + b"\x00\r\n\x00",
        "large": os.urandom(3 * 1024 * 1024 + 7),
    }
    for n, (artifact_id, data) in enumerate(contents.items()):
        store.add_artifact(artifact(artifact_id, data, at=T0 + timedelta(seconds=n)), data)
    for n, (artifact_id, data) in enumerate(contents.items()):
        assert store.get_artifact("t1", artifact_id) == (
            artifact(artifact_id, data, at=T0 + timedelta(seconds=n)),
            data,
        )
    assert store.get_artifact("other", "empty") is None
    assert store.get_artifact("t1", "nope") is None


def test_artifacts_are_listed_oldest_first_a_page_at_a_time(store: TaskStore) -> None:
    store.create_task(task())
    for n in (2, 0, 1):
        store.add_artifact(artifact(f"f{n}", b"x" * n, at=T0 + timedelta(seconds=n)), b"x" * n)
    page, total = store.list_artifacts("t1", offset=1, limit=5)
    assert ([a.artifact_id for a in page], total) == (["f1", "f2"], 3)
    assert page[1] == artifact("f2", b"xx", at=T0 + timedelta(seconds=2))
    assert store.list_artifacts("other", offset=0, limit=5) == ([], 0)


# The run journal


def test_journal_events_are_durable_once_recorded(url: str) -> None:
    first = TaskStore(url)
    first.create_task(task())
    first.record_event("t1", "model/1", {"reply": "hello", "usage": {"tokens": 3}})
    first.record_event("t1", "tool/1", {"result": [1, 2, None]})
    first.record_event("t1", "model/1", {"reply": "replaced"})
    first.close()

    second = TaskStore(url)
    try:
        assert second.journal("t1") == {"model/1": {"reply": "replaced"}, "tool/1": {"result": [1, 2, None]}}
        assert second.journal("other") == {}
    finally:
        second.close()


def test_an_event_for_no_task_is_a_store_error(store: TaskStore) -> None:
    with pytest.raises(StoreError):
        store.record_event("nope", "model/1", {"reply": "hello"})


# Migrations


def test_a_fresh_database_is_brought_to_the_latest_revision(url: str) -> None:
    assert revision_of(url) is None
    TaskStore(url).close()
    assert revision_of(url) == head_revision() is not None


def test_opening_a_database_again_changes_nothing(url: str) -> None:
    first = TaskStore(url)
    first.create_task(task())
    first.close()
    second = TaskStore(url)
    try:
        assert second.get_task("t1", owner=None) == task()
        assert revision_of(url) == head_revision()
    finally:
        second.close()


def test_the_migrations_create_the_tables_the_store_reads(url: str) -> None:
    TaskStore(url).close()
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), METADATA)
    finally:
        engine.dispose()
    assert differences == []


def test_stores_opening_a_fresh_database_at_once_all_succeed(url: str) -> None:
    stores = at_once(8, lambda: TaskStore(url))
    for opened in stores:
        opened.close()
    assert revision_of(url) == head_revision()


def test_stores_of_different_databases_opened_at_once_all_succeed(tmp_path: Path) -> None:
    # No database lock orders these upgrades: only the store's own, in the process.
    urls = iter([f"sqlite:///{tmp_path / f'tasks{n}.db'}" for n in range(8)])
    lock = threading.Lock()

    def open_next() -> TaskStore:
        with lock:
            url = next(urls)
        return TaskStore(url)

    for opened in at_once(8, open_next):
        opened.close()
    assert all(revision_of(f"sqlite:///{tmp_path / f'tasks{n}.db'}") == head_revision() for n in range(8))


def test_processes_opening_a_fresh_database_at_once_all_succeed(url: str) -> None:
    # Each process says when it is ready, then waits for the word to go: so they open the store together.
    script = (
        "import sys\n"
        "from registry.protocol.store import TaskStore\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "TaskStore(sys.argv[1]).close()\n"
    )
    with contextlib.ExitStack() as stack:
        processes = [
            stack.enter_context(
                subprocess.Popen(
                    [sys.executable, "-c", script, url],
                    cwd=REPOSITORY,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            for _ in range(4)
        ]
        for process in processes:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for process in processes:
            _, errors = process.communicate(timeout=60)
            assert process.returncode == 0, errors
    assert revision_of(url) == head_revision()


def test_a_database_of_a_newer_revision_is_a_configuration_error(url: str) -> None:
    TaskStore(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = 'from-the-future'"))
    engine.dispose()
    with pytest.raises(ConfigurationError, match="from-the-future"):
        TaskStore(url)


# Errors


@pytest.mark.parametrize(
    "bad",
    [
        "mysql://user:s3cret@db.example.com/tasks",
        "postgresql://user:s3cret@db.example.com/tasks",
        "not a database url",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:////nonexistent/directory/tasks.db",
        "postgresql+psycopg://user:s3cret@127.0.0.1:{port}/tasks",
    ],
)
def test_a_url_that_cannot_be_used_is_a_configuration_error_of_one_line_without_the_password(bad: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        TaskStore(bad.format(port=free_port()))
    message = str(raised.value)
    assert "\n" not in message
    assert "s3cret" not in message
    assert "task store" in message


def test_a_database_failure_is_a_store_error_of_one_line(url: str) -> None:
    opened = TaskStore(url)
    try:
        opened.create_task(task())
        engine = sa.create_engine(url)
        with engine.begin() as connection:
            connection.execute(sa.text("DROP TABLE journal"))
        engine.dispose()
        with pytest.raises(StoreError) as raised:
            opened.record_event("t1", "model/1", {"secret event": "never in the message"})
        assert "\n" not in str(raised.value)
        assert "never in the message" not in str(raised.value)
    finally:
        opened.close()
