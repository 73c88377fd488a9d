"""A step's end against a cancel (registry.protocol.store ``finish_step``),
on SQLite and on a real PostgreSQL: what the step produced (its answer, its
files, its action and its event log entries) is written with the step in
one transaction, only while the task still runs the step; a step that ends
after its task was cancelled is kept failed, with none of it, and the log
says so. The store is driven directly, so that the cancel comes exactly
between the step's start and its end."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from registry.protocol import tasklog
from registry.protocol.advance import CANCELLED_WHILE_RUNNING
from registry.protocol.records import ActionRecord, ArtifactRecord, Begun, StepEnd, StepRecord, TaskRecord
from registry.protocol.store import TaskStore
from tests.support.postgres_server import PostgresServer

T0 = datetime(2026, 11, 28, 9, 0, tzinfo=timezone.utc)
ANSWER = "Open Settings, then Profile."


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a new, empty database: a SQLite file, or one on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tasks.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
def store(url: str) -> Iterator[TaskStore]:
    opened = TaskStore(url)
    yield opened
    opened.close()


def running(store: TaskStore) -> Begun:
    """A background task, its step started by worker w1 (with its log entries)."""
    store.create_task(
        TaskRecord(
            task_id="t1",
            owner="alice",
            input="How do I change my e-mail address?",
            additional_input={"mode": "background"},
            agent="support/draft_answer",
            release_requested="latest",
            release_tag="v1.1.0",
            release_commit="0" * 40,
            digest="sha256:" + "ab" * 32,
            inputs={"question": "How do I change my e-mail address?"},
            status="queued",
            created_at=T0,
            updated_at=T0,
            mode="background",
            segments=1,
        )
    )
    planned = StepRecord(step_id="s1", task_id="t1", number=0, status="running", created_at=T0)
    begun = store.begin_step(planned, worker="w1", at=T0, entries=tasklog.step_started)
    assert begun is not None
    return begun


def cancel(store: TaskStore, task: TaskRecord) -> None:
    """What the service's cancel writes: the task's state and its log entry, together."""
    cancelled = replace(task, status="cancelled", updated_at=T0 + timedelta(seconds=1))
    entries = [tasklog.state_entry("cancelled")]
    assert store.set_task_status(task.task_id, from_states=("running",), task=cancelled, entries=entries)


def last_step_with_everything(begun: Begun) -> StepEnd:
    """The step's end as a worker writes it: the run's answer (and its
    file), a tool's file, an action proposed alongside, the log's entries;
    and the step as it is kept if the task was cancelled meanwhile."""
    at = T0 + timedelta(seconds=2)
    step = replace(begun.step, status="completed", output=ANSWER, is_last=True, finished_at=at,
                   additional_output={"state": "completed", "outcome": "completed"})  # fmt: skip
    task = replace(begun.task, status="completed", outcome="completed", output=ANSWER, running_step_id=None,
                   updated_at=at)  # fmt: skip
    files = [file("answer.md", ANSWER.encode()), file("report.csv", b"a,b\n1,2\n")]
    action = ActionRecord(action_id="a1", task_id="t1", step_id="s1", key="/chat:1/tool:1:decision",
                          agent="support/draft_answer", tool="send_mail", arguments={"to": "x@example.com"},
                          thought=None, status="pending", created_at=at)  # fmt: skip
    after_cancel = replace(begun.step, status="failed", output=None, is_last=True, finished_at=at,
                           additional_output={"state": "failed", "error": CANCELLED_WHILE_RUNNING})  # fmt: skip
    streamed = [("text", {"step_id": "s1", "agent": "support/draft_answer", "delta": "then Profile."})]
    made = [tasklog.action_entry(action), *(tasklog.artifact_entry(artifact) for artifact, _ in files)]
    return StepEnd(
        step=step,
        task=task,
        entries=[*streamed, *made, *tasklog.step_finished(step, task)],
        after_cancel=after_cancel,
        entries_after_cancel=[*streamed, *tasklog.step_ended_after_cancel(after_cancel)],
        artifacts=files,
        action=action,
    )


def file(name: str, data: bytes) -> tuple[ArtifactRecord, bytes]:
    artifact = ArtifactRecord(artifact_id=f"s1:{name}", task_id="t1", agent_created=True, file_name=name,
                              relative_path=None, content_type="text/plain", size=len(data), sha256="0" * 64,
                              created_at=T0, step_id="s1")  # fmt: skip
    return artifact, data


def logged(store: TaskStore) -> list[tuple[str, str | None]]:
    """The task's log: each entry's kind, and the status it names (if any)."""
    return [(e.kind, e.data.get("status")) for e in store.events_after("t1", 0)]


def test_a_step_that_ends_after_its_task_was_cancelled_keeps_no_answer_file_or_action(store: TaskStore) -> None:
    begun = running(store)
    cancel(store, begun.task)
    end = last_step_with_everything(begun)

    assert store.finish_step(end) is False
    task = store.get_task("t1", owner=None)
    assert task is not None
    assert (task.status, task.outcome, task.output, task.running_step_id) == ("cancelled", None, None, None)
    assert store.get_step("t1", "s1") == end.after_cancel
    assert store.list_artifacts("t1", offset=0, limit=10) == ([], 0)
    assert store.list_actions("t1") == [] and store.pending_action("t1") is None
    assert logged(store) == [
        ("state", "running"),
        ("step", "running"),
        ("state", "cancelled"),
        ("text", None),  # the answer's text streamed before the cancel came
        ("step", "failed"),
    ]
    [ended] = [e for e in store.events_after("t1", 0) if e.kind == "step" and e.data["status"] == "failed"]
    assert (ended.data["output"], ended.data["error"]) == (None, CANCELLED_WHILE_RUNNING)


def test_a_step_that_ends_first_writes_its_answer_files_action_and_entries_together(store: TaskStore) -> None:
    begun = running(store)
    end = last_step_with_everything(begun)

    assert store.finish_step(end) is True
    assert store.get_step("t1", "s1") == end.step
    task = store.get_task("t1", owner=None)
    assert task is not None and (task.status, task.output) == ("completed", ANSWER)
    artifacts, total = store.list_artifacts("t1", offset=0, limit=10)
    assert (sorted(a.file_name for a in artifacts), total) == (["answer.md", "report.csv"], 2)
    assert store.get_artifact("t1", "s1:answer.md") == (end.artifacts[0][0], ANSWER.encode())
    assert store.pending_action("t1") == end.action
    assert [kind for kind, _ in logged(store)] == [
        "state", "step", "text", "action", "artifact", "artifact", "step", "state", "outcome"
    ]  # fmt: skip
    # The cancel comes too late: the task is over, and stays as the step left it.
    cancelled = replace(begun.task, status="cancelled")
    assert store.set_task_status("t1", from_states=("running",), task=cancelled) is False
    # A worker that took the step over and ends it again changes nothing.
    assert store.finish_step(replace(end, entries=[("state", {"status": "again"})])) is False
    assert store.get_step("t1", "s1") == end.step
    assert len(logged(store)) == 9


@pytest.mark.postgres
def test_on_postgresql_a_cancel_not_yet_committed_holds_the_steps_end_and_wins(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    store = TaskStore(url)
    other = sa.create_engine(url)
    try:
        begun = running(store)
        end = last_step_with_everything(begun)
        won: list[bool] = []
        with other.connect() as cancelling:
            cancelling.execute(sa.text("UPDATE tasks SET status = 'cancelled' WHERE task_id = 't1'"))
            ending = threading.Thread(target=lambda: won.append(store.finish_step(end)))
            ending.start()
            # The step's end waits for the task's row, which the cancel holds.
            _wait_for_a_lock_wait(other)
            assert won == []
            cancelling.commit()
        ending.join()
        assert won == [False]
        assert store.list_artifacts("t1", offset=0, limit=10) == ([], 0)
        assert store.list_actions("t1") == []
        assert store.get_step("t1", "s1") == end.after_cancel
    finally:
        other.dispose()
        store.close()


def _wait_for_a_lock_wait(engine: sa.Engine) -> None:
    """Until a session of the database waits for a lock (pg_stat_activity)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(3000):
        with engine.connect() as db:
            if db.execute(query).scalar_one():
                return
        time.sleep(0.01)
    raise AssertionError("the step's end never waited for the cancel's lock")
