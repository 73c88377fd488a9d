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
from registry.protocol.records import ActionRecord, ArtifactRecord, StepRecord, TaskRecord
from registry.protocol.store import MIGRATIONS, TaskStore
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


# Claims


def test_a_claim_starts_a_step_and_returns_the_running_task(store: TaskStore) -> None:
    store.create_task(task())
    claimed = store.claim_task("t1", owner="alice", step=step(at=T0 + timedelta(seconds=1)), from_states=RESUMABLE)
    assert claimed == replace(
        task(), status="running", running_step_id="s1", steps=1, updated_at=T0 + timedelta(seconds=1)
    )
    assert claimed == store.get_task("t1", owner=None)
    assert store.get_step("t1", "s1") == replace(step(at=T0 + timedelta(seconds=1)), number=1, status="running")


def test_a_claim_of_a_task_in_another_state_or_of_another_owner_changes_nothing(store: TaskStore) -> None:
    store.create_task(task())
    assert store.claim_task("t1", owner="mallory", step=step(), from_states=RESUMABLE) is None
    assert store.claim_task("t1", owner="alice", step=step(), from_states=("waiting_for_input",)) is None
    assert store.claim_task("nope", owner=None, step=step(task_id="nope"), from_states=RESUMABLE) is None
    assert store.get_task("t1", owner=None) == task()
    assert store.list_steps("t1", offset=0, limit=10) == ([], 0)


def test_of_eight_concurrent_claims_of_a_task_exactly_one_wins(store: TaskStore) -> None:
    store.create_task(task())
    ids = iter(range(8))
    lock = threading.Lock()

    def claim() -> TaskRecord | None:
        with lock:
            step_id = f"s{next(ids)}"
        return store.claim_task("t1", owner="alice", step=step(step_id), from_states=RESUMABLE)

    won = [result for result in at_once(8, claim) if result is not None]
    assert len(won) == 1
    assert won[0].steps == 1
    steps, total = store.list_steps("t1", offset=0, limit=10)
    assert total == 1
    assert [(s.step_id, s.number, s.status) for s in steps] == [(won[0].running_step_id, 1, "running")]


def test_concurrent_claims_through_separate_stores_also_let_exactly_one_win(url: str) -> None:
    # Separate stores: separate engines, as replicas (or processes) have.
    stores = [TaskStore(url) for _ in range(4)]
    try:
        stores[0].create_task(task())
        ids = iter(range(4))
        lock = threading.Lock()

        def claim() -> TaskRecord | None:
            with lock:
                n = next(ids)
            return stores[n].claim_task("t1", owner=None, step=step(f"s{n}"), from_states=RESUMABLE)

        assert sum(result is not None for result in at_once(4, claim)) == 1
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
    assert store.claim_task("t1", owner=None, step=step(), from_states=RESUMABLE) is None


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


def test_finishing_a_step_writes_the_step_and_the_task_and_frees_it(store: TaskStore) -> None:
    store.create_task(task())
    claimed = store.claim_task("t1", owner="alice", step=step(), from_states=RESUMABLE)
    assert claimed is not None
    running = store.get_step("t1", "s1")
    assert running is not None
    done = finished(running, at=T0 + timedelta(seconds=5), output="drafted")
    after = replace(
        claimed,
        status="waiting_for_input",
        outcome=None,
        output="drafted",
        error=None,
        updated_at=T0 + timedelta(seconds=5),
    )
    assert store.finish_step(done, after) is True
    assert store.get_step("t1", "s1") == done
    assert store.get_task("t1", owner=None) == replace(after, running_step_id=None)


def test_steps_are_numbered_and_listed_in_order(store: TaskStore) -> None:
    store.create_task(task())
    for n in range(1, 4):
        claimed = store.claim_task("t1", owner="alice", step=step(f"s{n}"), from_states=RESUMABLE)
        assert claimed is not None and claimed.steps == n
        running = store.get_step("t1", f"s{n}")
        assert running is not None
        end = T0 + timedelta(seconds=n)
        store.finish_step(
            finished(running, at=end, output=str(n)),
            replace(claimed, status="waiting_for_input", updated_at=end),
        )
    page, total = store.list_steps("t1", offset=1, limit=5)
    assert ([(s.step_id, s.number, s.output) for s in page], total) == ([("s2", 2, "2"), ("s3", 3, "3")], 3)
    assert store.get_step("other", "s1") is None


def test_recovery_fails_steps_left_running_and_their_tasks_wait_for_input(store: TaskStore) -> None:
    store.create_task(task("t1"))
    store.create_task(task("t2"))
    store.create_task(task("t3"))
    for task_id in ("t1", "t2"):
        store.claim_task(task_id, owner=None, step=step(f"{task_id}-s", task_id), from_states=RESUMABLE)

    assert store.fail_running_steps("the service restarted") == 2
    for task_id in ("t1", "t2"):
        failed = store.get_step(task_id, f"{task_id}-s")
        assert failed is not None
        assert (failed.status, failed.additional_output) == ("failed", {"error": "the service restarted"})
        assert failed.finished_at is not None and failed.finished_at.tzinfo == timezone.utc
        freed = store.get_task(task_id, owner=None)
        assert freed is not None and (freed.status, freed.running_step_id) == ("waiting_for_input", None)
    assert store.get_task("t3", owner=None) == task("t3")
    assert store.fail_running_steps("again") == 0
    # Freed, the task can run its next step.
    assert store.claim_task("t1", owner=None, step=step("t1-s2", "t1"), from_states=RESUMABLE) is not None


def test_a_step_failed_by_recovery_is_not_finished_later(store: TaskStore) -> None:
    store.create_task(task())
    claimed = store.claim_task("t1", owner="alice", step=step(), from_states=RESUMABLE)
    running = store.get_step("t1", "s1")
    assert claimed is not None and running is not None
    store.fail_running_steps("the service restarted")
    late = finished(running, at=T0 + timedelta(seconds=9), output="late")
    assert store.finish_step(late, replace(claimed, status="completed", outcome="completed")) is False
    failed = store.get_step("t1", "s1")
    assert failed is not None and failed.status == "failed"
    freed = store.get_task("t1", owner=None)
    assert freed is not None and freed.status == "waiting_for_input"


# Actions


def test_an_action_is_decided_once(store: TaskStore) -> None:
    store.create_task(task())
    store.claim_task("t1", owner=None, step=step(), from_states=RESUMABLE)
    store.add_action(action("a1", at=T0 + timedelta(seconds=1)))
    assert store.pending_action("t1") == action("a1", at=T0 + timedelta(seconds=1))

    edited = {"to": "oncall@example.com", "body": "edited"}
    assert store.decide_action("a1", status="edited", step_id="s2", reason="wrong team", edited_arguments=edited)
    assert not store.decide_action("a1", status="rejected", step_id="s3", reason=None, edited_arguments=None)
    assert not store.decide_action("nope", status="approved", step_id="s3", reason=None, edited_arguments=None)

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
