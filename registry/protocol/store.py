"""The Agent Protocol service's tasks, steps, actions, artifacts and run
journals, kept in SQLite (embedded, one process) or PostgreSQL (shared by
replicas), through one SQLAlchemy engine.

``TaskStore(url)`` takes ``sqlite:///path/to/tasks.db`` or
``postgresql+psycopg://user:password@host/database`` and brings the schema
(``registry.protocol.tables``) to the latest revision on construction
(Alembic, through ``registry.protocol.database``). Every method is one
transaction of its own and returns the frozen records of
``registry.protocol.records``.

Errors: a URL that cannot be used at startup raises ``ConfigurationError``
(one line, password redacted); a database failure afterwards raises
``StoreError``. Anything else that escapes is a bug in the caller or here.

At most one segment of a task is queued or running at a time, across
threads, processes and hosts: ``submit`` is a conditional UPDATE of the
task's status and segment count, and of two concurrent submits exactly one
changes a row; the segment is enqueued in the same transaction.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Table, func, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from registry.errors import InvalidState, StoreError
from registry.protocol.database import DATABASE_FAILURES, WRITES, first_line, open_engine
from registry.protocol.records import (
    ActionRecord,
    ArtifactRecord,
    Begun,
    Decision,
    LogEntry,
    StepEnd,
    StepRecord,
    TaskEvent,
    TaskRecord,
)
from registry.protocol.tables import actions, artifact_data, artifacts, journal, steps, task_events, tasks


class DecisionConflict(InvalidState):
    """Two decisions on one action: the second loses (409)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, entity="action", state="decided", allowed=[])


class TaskStore:
    """Tasks, steps, actions, artifacts and journals in one database."""

    def __init__(self, url: str) -> None:
        self._engine = open_engine(url)
        self._appended: list[Callable[[Sequence[TaskEvent]], None]] = []

    def on_appended(self, told: Callable[[Sequence[TaskEvent]], None]) -> None:
        """Call ``told`` with the event log entries each transaction of this
        store appended (a task's, in order), once it has committed: whichever
        method wrote them (a step's start and end write theirs with the
        step). On the writer's thread: ``told`` takes them and returns."""
        self._appended.append(told)

    def close(self) -> None:
        """Close every connection the store holds."""
        self._engine.dispose()

    def transaction(self, *, writes: bool = False) -> AbstractContextManager[Connection]:
        """One transaction on the store's database, for the tables another
        package keeps there (``registry.a2a``'s push configurations):
        committed when the block ends without an error, a database failure
        raised as ``StoreError``. ``writes`` says the transaction writes
        (on SQLite it then takes the write lock when it begins)."""
        return self._transaction(writes=writes)

    # Tasks

    def create_task(
        self,
        task: TaskRecord,
        *,
        files: Sequence[tuple[ArtifactRecord, bytes]] = (),
        enqueue: Callable[[Connection, TaskRecord], None] | None = None,
        entries: Sequence[LogEntry] = (),
    ) -> None:
        """Add a new task and its ``files``, and its first log ``entries``;
        ``enqueue`` puts its first segment on the run queue in the same
        transaction (a background task), so that no worker starts it before
        its files and its first entries are there."""
        with self._transaction(writes=True) as db:
            db.execute(insert(tasks).values(**_values(task)))
            for artifact, data in files:
                db.execute(insert(artifacts).values(**_values(artifact)))
                db.execute(insert(artifact_data).values(artifact_id=artifact.artifact_id, data=data))
            _append_in(db, task.task_id, entries)
            if enqueue is not None:
                enqueue(db, task)

    def get_task(self, task_id: str, *, owner: str | None) -> TaskRecord | None:
        """The task, if it exists and belongs to ``owner`` (``None``: to anyone)."""
        with self._transaction() as db:
            row = db.execute(select(tasks).where(tasks.c.task_id == task_id, *_owned_by(owner))).one_or_none()
        return None if row is None else TaskRecord(**row._mapping)

    def list_tasks(self, *, owner: str | None, offset: int, limit: int) -> tuple[list[TaskRecord], int]:
        """A page of the tasks of ``owner`` (``None``: everyone's), oldest
        first, and how many there are in all."""
        owned = _owned_by(owner)
        with self._transaction() as db:
            total = db.execute(select(func.count()).select_from(tasks).where(*owned)).scalar_one()
            rows = db.execute(
                select(tasks).where(*owned).order_by(tasks.c.created_at, tasks.c.task_id).offset(offset).limit(limit)
            ).all()
        return [TaskRecord(**row._mapping) for row in rows], total

    def submit(
        self,
        task_id: str,
        *,
        owner: str | None,
        from_states: Collection[str],
        segment: int,
        at: datetime,
        enqueue: Callable[[Connection, TaskRecord], None],
        step: StepRecord | None = None,
        decision: Decision | None = None,
        entries: Callable[[TaskRecord, ActionRecord | None], Sequence[LogEntry]] | None = None,
    ) -> TaskRecord | None:
        """Give the task (of ``owner``; ``None``: of anyone) its next segment,
        number ``segment``, if it is in one of ``from_states`` and has had one
        segment fewer: it becomes ``queued``, and ``enqueue`` puts that segment on the run queue in
        the same transaction. A stepped task's ``step`` is stored ``created``,
        numbered by the task's new count of steps. A ``decision`` on a pending
        action is recorded with it (the action and the run's journal), or
        ``DecisionConflict`` is raised and nothing changes when the action was
        decided meanwhile. The log's ``entries`` for the queued task and
        the decided action are appended with it, before a worker can log its
        step. Returns the task as it now is, or ``None``, changing nothing,
        when it is not there or not in those states."""
        with self._transaction(writes=True) as db:
            submitted = db.execute(
                update(tasks)
                .where(
                    tasks.c.task_id == task_id,
                    tasks.c.status.in_(from_states),
                    tasks.c.segments == segment - 1,
                    *_owned_by(owner),
                )
                .values(
                    status="queued",
                    segments=tasks.c.segments + 1,
                    steps=tasks.c.steps + (1 if step is not None else 0),
                    updated_at=at,
                )
            )
            if submitted.rowcount != 1:
                return None
            task = TaskRecord(**db.execute(select(tasks).where(tasks.c.task_id == task_id)).one()._mapping)
            if step is not None:
                db.execute(insert(steps).values(**_values(dataclasses.replace(step, number=task.steps))))
            decided = None
            if decision is not None:
                _record_decision(db, decision)
                row = db.execute(select(actions).where(actions.c.action_id == decision.action_id)).one()
                decided = ActionRecord(**row._mapping)
            if entries is not None:
                _append_in(db, task_id, entries(task, decided), locked=True)
            enqueue(db, task)
        return task

    def begin_step(
        self,
        step: StepRecord,
        *,
        worker: str,
        at: datetime,
        entries: Callable[[TaskRecord, StepRecord, str], Sequence[LogEntry]] | None = None,
    ) -> Begun | None:
        """Start ``step`` on ``worker``: the step stored ``created`` by a
        stepped task's ``submit``, the step a dead worker left ``running``
        (taken over), or a background task's next step (stored now, numbered
        after the others). The task becomes ``running`` with it, and the
        ``entries`` for the two (given the task's status before) are
        appended to its event log. Returns the
        task, the step as they now are and the task's journal; the step as
        it was if it is already over (its worker died after finishing it);
        ``None``, changing nothing, when the task is no longer queued or
        running (cancelled). One transaction: a step's start costs one commit."""
        with self._transaction(writes=True) as db:
            row = db.execute(select(steps).where(steps.c.step_id == step.step_id)).one_or_none()
            if row is not None and row.status in ("completed", "failed"):
                task = TaskRecord(**db.execute(select(tasks).where(tasks.c.task_id == step.task_id)).one()._mapping)
                return Begun(task, StepRecord(**row._mapping), _journal_of(db, step.task_id))
            was = db.execute(select(tasks.c.status).where(tasks.c.task_id == step.task_id)).scalar_one_or_none()
            started = db.execute(
                update(tasks)
                .where(tasks.c.task_id == step.task_id, tasks.c.status.in_(("queued", "running")))
                .values(
                    status="running",
                    running_step_id=step.step_id,
                    steps=tasks.c.steps + (1 if row is None else 0),
                    updated_at=at,
                )
                .returning(*tasks.c)
            ).one_or_none()
            if started is None:
                return None
            task = TaskRecord(**started._mapping)
            if row is None:
                running = dataclasses.replace(step, number=task.steps, status="running", worker=worker)
                db.execute(insert(steps).values(**_values(running)))
            else:
                running = dataclasses.replace(StepRecord(**row._mapping), status="running", worker=worker)
                db.execute(update(steps).where(steps.c.step_id == step.step_id).values(status="running", worker=worker))
            if entries is not None:
                _append_in(db, task.task_id, entries(task, running, was or ""), locked=True)
            return Begun(task, running, _journal_of(db, task.task_id))

    def set_task_status(
        self, task_id: str, *, from_states: Collection[str], task: TaskRecord, entries: Sequence[LogEntry] = ()
    ) -> bool:
        """Write the task's ``status``, ``outcome``, ``output``, ``error`` and
        ``updated_at`` from ``task`` if the task is in one of
        ``from_states`` (a cancel, say), and append ``entries`` to its event
        log with it. Returns ``False``, changing nothing, when it is not
        there or in another state."""
        with self._transaction(writes=True) as db:
            changed = db.execute(
                update(tasks)
                .where(tasks.c.task_id == task_id, tasks.c.status.in_(from_states))
                .values(
                    status=task.status,
                    outcome=task.outcome,
                    output=task.output,
                    error=task.error,
                    updated_at=task.updated_at,
                )
            )
            if changed.rowcount == 1:
                _append_in(db, task_id, entries, locked=True)
        return changed.rowcount == 1

    def finish_step(self, end: StepEnd) -> bool:
        """Write what the step left, in one transaction, if the task still
        runs it: the step's final fields (``status``, ``name``, ``output``,
        ``additional_output``, ``is_last``, ``finished_at``), the task's
        (``status``, ``outcome``, ``output``, ``error``, ``updated_at``),
        its files, its action and its event log entries. A task cancelled
        meanwhile keeps its state and only loses its running step; the step
        is written as ``end.after_cancel``, with its entries, and nothing
        else is. Returns whether the task still ran the step.

        The task's row decides: its conditional UPDATE comes first, so that
        on PostgreSQL a cancel committed before it is seen (the row is read
        again once its lock is free) and a cancel after it waits for this
        transaction and then finds the task no longer running; on SQLite the
        write transactions run one at a time. A step ended already (by a
        worker that took it over) is not written again."""
        step = end.step
        with self._transaction(writes=True) as db:
            finished = db.execute(
                update(tasks)
                .where(
                    tasks.c.task_id == step.task_id,
                    tasks.c.running_step_id == step.step_id,
                    tasks.c.status == "running",
                )
                .values(
                    status=end.task.status,
                    outcome=end.task.outcome,
                    output=end.task.output,
                    error=end.task.error,
                    running_step_id=None,
                    updated_at=end.task.updated_at,
                )
            )
            if finished.rowcount != 1:
                db.execute(
                    update(tasks)
                    .where(tasks.c.task_id == step.task_id, tasks.c.running_step_id == step.step_id)
                    .values(running_step_id=None)
                )
                if _write_ended(db, end.after_cancel):
                    _append_in(db, step.task_id, end.entries_after_cancel)
                return False
            _write_ended(db, step)
            for artifact, data in end.artifacts:
                if _insert_new(db, artifacts, _values(artifact)):
                    db.execute(insert(artifact_data).values(artifact_id=artifact.artifact_id, data=data))
            if end.action is not None:
                _insert_new(db, actions, _values(end.action))
            _append_in(db, step.task_id, end.entries, locked=True)
        return True

    def deliver(self, task_id: str, number: int) -> None:
        """A background task's ``POST .../steps`` has returned the steps up to ``number``."""
        with self._transaction(writes=True) as db:
            db.execute(
                update(tasks).where(tasks.c.task_id == task_id, tasks.c.delivered < number).values(delivered=number)
            )

    # Steps

    def get_step(self, task_id: str, step_id: str) -> StepRecord | None:
        """The step of the task, if it exists."""
        with self._transaction() as db:
            row = db.execute(select(steps).where(steps.c.task_id == task_id, steps.c.step_id == step_id)).one_or_none()
        return None if row is None else StepRecord(**row._mapping)

    def list_steps(self, task_id: str, *, offset: int, limit: int) -> tuple[list[StepRecord], int]:
        """A page of the task's steps, by number, and how many there are in all."""
        with self._transaction() as db:
            total = db.execute(select(func.count()).select_from(steps).where(steps.c.task_id == task_id)).scalar_one()
            rows = db.execute(
                select(steps).where(steps.c.task_id == task_id).order_by(steps.c.number).offset(offset).limit(limit)
            ).all()
        return [StepRecord(**row._mapping) for row in rows], total

    # Actions

    def add_action(self, action: ActionRecord) -> bool:
        """Add an action a step proposed, unless it is there already (a worker
        that took a step over proposes it again); whether it was added."""
        with self._transaction(writes=True) as db:
            return _insert_new(db, actions, _values(action))

    def pending_action(self, task_id: str) -> ActionRecord | None:
        """The task's oldest action still ``pending``, if any."""
        with self._transaction() as db:
            row = db.execute(
                select(actions)
                .where(actions.c.task_id == task_id, actions.c.status == "pending")
                .order_by(actions.c.created_at, actions.c.action_id)
                .limit(1)
            ).one_or_none()
        return None if row is None else ActionRecord(**row._mapping)

    def list_actions(self, task_id: str) -> list[ActionRecord]:
        """The task's actions, oldest first."""
        with self._transaction() as db:
            rows = db.execute(
                select(actions).where(actions.c.task_id == task_id).order_by(actions.c.created_at, actions.c.action_id)
            ).all()
        return [ActionRecord(**row._mapping) for row in rows]

    # Artifacts

    def add_artifact(self, artifact: ArtifactRecord, data: bytes) -> bool:
        """Add an artifact and its bytes, unless it is there already (a worker
        that took a step over writes it again); whether it was added."""
        with self._transaction(writes=True) as db:
            if not _insert_new(db, artifacts, _values(artifact)):
                return False
            db.execute(insert(artifact_data).values(artifact_id=artifact.artifact_id, data=data))
        return True

    def list_artifacts(self, task_id: str, *, offset: int, limit: int) -> tuple[list[ArtifactRecord], int]:
        """A page of the task's artifacts, oldest first, and how many there are in all."""
        with self._transaction() as db:
            total = db.execute(
                select(func.count()).select_from(artifacts).where(artifacts.c.task_id == task_id)
            ).scalar_one()
            rows = db.execute(
                select(artifacts)
                .where(artifacts.c.task_id == task_id)
                .order_by(artifacts.c.created_at, artifacts.c.artifact_id)
                .offset(offset)
                .limit(limit)
            ).all()
        return [ArtifactRecord(**row._mapping) for row in rows], total

    def get_artifact(self, task_id: str, artifact_id: str) -> tuple[ArtifactRecord, bytes] | None:
        """The task's artifact and its bytes, if it exists."""
        with self._transaction() as db:
            row = db.execute(
                select(artifacts, artifact_data.c.data)
                .join(artifact_data, artifact_data.c.artifact_id == artifacts.c.artifact_id)
                .where(artifacts.c.task_id == task_id, artifacts.c.artifact_id == artifact_id)
            ).one_or_none()
        if row is None:
            return None
        fields = dict(row._mapping)
        data = bytes(fields.pop("data"))
        return ArtifactRecord(**fields), data

    # The run journal

    def journal(self, task_id: str) -> dict[str, dict[str, Any]]:
        """Every event recorded for the task, by key."""
        with self._transaction() as db:
            return _journal_of(db, task_id)

    def record_event(self, task_id: str, key: str, event: Mapping[str, Any]) -> None:
        """Record the event under ``key``, replacing any recorded before;
        committed (durable) once this returns."""
        values = {"task_id": task_id, "key": key, "event": dict(event), "recorded_at": datetime.now(timezone.utc)}
        with self._transaction(writes=True) as db:
            db.execute(_upsert_event(db.dialect.name, values))

    # The event log

    def append_event(self, task_id: str, kind: str, data: Mapping[str, Any]) -> int:
        """Append an entry to the task's event log; its number (1 for the
        first), committed once this returns."""
        return self.append_events(task_id, [(kind, data)])[-1]

    def append_events(self, task_id: str, entries: Sequence[LogEntry]) -> list[int]:
        """Append ``entries`` (each a kind and its data) to the task's event
        log in one transaction, numbered one after another: a reader sees all
        of them or none. Their numbers, committed once this returns. Writers
        of one task never share a number (``_append_in``)."""
        with self._transaction(writes=True) as db:
            return _append_in(db, task_id, entries)

    def events_after(self, task_id: str, after: int, *, limit: int = 500) -> list[TaskEvent]:
        """The task's entries numbered above ``after``, oldest first, at most ``limit``."""
        with self._transaction() as db:
            rows = db.execute(
                select(task_events)
                .where(task_events.c.task_id == task_id, task_events.c.seq > after)
                .order_by(task_events.c.seq)
                .limit(limit)
            ).all()
        return [TaskEvent(**row._mapping) for row in rows]

    def last_event(self, task_id: str) -> int:
        """The number of the task's last entry; 0 when its log is empty."""
        with self._transaction() as db:
            last = db.execute(
                select(func.coalesce(func.max(task_events.c.seq), 0)).where(task_events.c.task_id == task_id)
            ).scalar_one()
        return int(last)

    def events_in(self, windows: Collection[tuple[str, int]], *, batch: int) -> list[TaskEvent]:
        """The entries of several tasks in one query: for each ``(task_id,
        after)`` of ``windows``, the task's entries numbered ``after + 1`` to
        ``after + batch`` (a log is numbered without gaps), by task and
        number (an entry in two windows comes twice). The windows go as one
        JSON parameter, so that the query is the same text however many
        there are: nothing to compile again, nothing nested to parse."""
        if not windows:
            return []
        listed = json.dumps([{"task_id": task_id, "after": after} for task_id, after in windows])
        with self._transaction() as db:
            query = _EVENTS_IN_POSTGRESQL if db.dialect.name == "postgresql" else _EVENTS_IN_SQLITE
            rows = db.execute(query, {"windows": listed, "batch": batch}).all()
        return [TaskEvent(**row._mapping) for row in rows]

    @contextmanager
    def _transaction(self, *, writes: bool = False) -> Iterator[Connection]:
        """One transaction, committed when the block ends without an error;
        database failures come out as ``StoreError``."""
        appended: list[TaskEvent] = []
        try:
            with self._engine.connect() as connection:
                connection.execution_options(**{WRITES: writes})
                connection.info[_APPENDED] = appended
                try:
                    with connection.begin():
                        yield connection
                finally:
                    del connection.info[_APPENDED]
        except DATABASE_FAILURES as exc:
            raise StoreError(f"the task store failed: {first_line(exc)}") from exc
        if appended:
            for told in self._appended:
                told(appended)


_APPENDED = "prompt_registry.appended"
"""Where a connection's transaction keeps the entries it appended, told once it commits."""


_EVENTS_COLUMNS = "e.task_id, e.seq, e.kind, e.data, e.created_at"
_EVENTS_IN_SQLITE = text(
    f"SELECT {_EVENTS_COLUMNS} FROM json_each(:windows) AS w JOIN task_events AS e"
    " ON e.task_id = json_extract(w.value, '$.task_id') AND e.seq > json_extract(w.value, '$.after')"
    " AND e.seq <= json_extract(w.value, '$.after') + :batch ORDER BY e.task_id, e.seq"
).columns(*task_events.c)
_EVENTS_IN_POSTGRESQL = text(
    f"SELECT {_EVENTS_COLUMNS} FROM jsonb_to_recordset(CAST(:windows AS jsonb)) AS w(task_id text, after integer)"
    " JOIN task_events AS e ON e.task_id = w.task_id AND e.seq > w.after AND e.seq <= w.after + :batch"
    " ORDER BY e.task_id, e.seq"
).columns(*task_events.c)
"""``events_in``'s query on each backend: the windows joined with the log,
each an index range (the log's key is the task and the number)."""


def _journal_of(db: Connection, task_id: str) -> dict[str, dict[str, Any]]:
    rows = db.execute(select(journal.c.key, journal.c.event).where(journal.c.task_id == task_id)).all()
    return {row.key: row.event for row in rows}


def _write_ended(db: Connection, step: StepRecord) -> bool:
    """The step's final fields, unless it has ended already; whether they were written."""
    written = db.execute(
        update(steps)
        .where(steps.c.step_id == step.step_id, steps.c.status == "running")
        .values(
            status=step.status,
            name=step.name,
            output=step.output,
            additional_output=step.additional_output,
            is_last=step.is_last,
            finished_at=step.finished_at,
        )
    )
    return written.rowcount == 1


def _append_in(db: Connection, task_id: str, entries: Sequence[LogEntry], *, locked: bool = False) -> list[int]:
    """Append ``entries`` to the task's event log in ``db``'s transaction,
    numbered after its last entry; their numbers. Writers of one task never
    share a number: SQLite's write transactions run one at a time, and on
    PostgreSQL each writer takes the task's row lock first (``locked``: the
    transaction holds it already, having updated the row), so that the next
    one reads the last number once this one has committed."""
    if not entries:
        return []
    if db.dialect.name == "postgresql" and not locked:
        db.execute(select(tasks.c.task_id).where(tasks.c.task_id == task_id).with_for_update(key_share=True))
    return _insert_entries(db, task_id, entries)


def _insert_entries(db: Connection, task_id: str, entries: Sequence[LogEntry]) -> list[int]:
    last = db.execute(
        select(func.coalesce(func.max(task_events.c.seq), 0)).where(task_events.c.task_id == task_id)
    ).scalar_one()
    now = datetime.now(timezone.utc)
    numbers = [int(last) + offset for offset in range(1, len(entries) + 1)]
    written = [
        TaskEvent(task_id=task_id, seq=seq, kind=kind, data=dict(data), created_at=now)
        for seq, (kind, data) in zip(numbers, entries, strict=True)
    ]
    db.execute(insert(task_events), [dataclasses.asdict(entry) for entry in written])
    told = db.info.get(_APPENDED)
    if told is not None:  # a transaction of the store's own: told once it commits
        told.extend(written)
    return numbers


def _record_decision(db: Connection, decision: Decision) -> None:
    """The decision on its action, if that is still pending, and in the run's journal."""
    decided = db.execute(
        update(actions)
        .where(actions.c.action_id == decision.action_id, actions.c.status == "pending")
        .values(
            status=decision.status,
            decided_by_step_id=decision.step_id,
            reason=decision.reason,
            edited_arguments=decision.edited_arguments,
        )
    )
    if decided.rowcount != 1:
        raise DecisionConflict("the action was decided by another request")
    values = {
        "task_id": decision.task_id,
        "key": decision.key,
        "event": decision.journal_event(),
        "recorded_at": datetime.now(timezone.utc),
    }
    db.execute(_upsert_event(db.dialect.name, values))


def _insert_new(db: Connection, table: Table, values: dict[str, Any]) -> bool:
    """Insert the row unless its primary key is taken; whether it was inserted."""
    dialect = postgresql if db.dialect.name == "postgresql" else sqlite
    key = next(iter(table.primary_key.columns))
    # RETURNING, not rowcount: psycopg's rowcount is not the rows inserted here.
    inserted = db.execute(dialect.insert(table).values(**values).on_conflict_do_nothing().returning(key))
    return inserted.first() is not None


def _owned_by(owner: str | None) -> list[ColumnElement[bool]]:
    return [] if owner is None else [tasks.c.owner == owner]


def _values(record: TaskRecord | StepRecord | ActionRecord | ArtifactRecord) -> dict[str, Any]:
    # The tables' columns are named after the records' fields.
    return {field.name: getattr(record, field.name) for field in dataclasses.fields(record)}


def _upsert_event(dialect: str, values: dict[str, Any]) -> postgresql.Insert | sqlite.Insert:
    statement = postgresql.insert(journal) if dialect == "postgresql" else sqlite.insert(journal)
    statement = statement.values(**values)
    return statement.on_conflict_do_update(
        index_elements=[journal.c.task_id, journal.c.key],
        set_={"event": statement.excluded.event, "recorded_at": statement.excluded.recorded_at},
    )
