"""The task store's schema: its tables, as SQLAlchemy reads and writes them.

``METADATA`` holds every table (tasks, steps, actions, artifacts and their
bytes, the run journal, each task's event log and its push
notification configurations); ``migrations/versions/`` creates the same
schema, and a test checks that the two agree. Datetimes are stored as UTC on
every backend (``UTCDateTime``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend: SQLite keeps no zone,
    so values are stored as UTC and read back with ``timezone.utc``."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime cannot be stored as UTC: {value.isoformat()}")
        utc = value.astimezone(timezone.utc)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _nullable_json() -> JSON:
    # None is SQL NULL, not the JSON value null, so that it reads back as None.
    return JSON(none_as_null=True)


METADATA = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)
"""The schema as the code reads it; ``migrations/versions/`` creates it, and a
test checks that the two agree."""

tasks = Table(
    "tasks",
    METADATA,
    Column("task_id", String, primary_key=True),
    Column("owner", String, nullable=False),
    Column("input", Text),
    Column("additional_input", JSON, nullable=False),
    Column("agent", String, nullable=False),
    Column("release_requested", String, nullable=False),
    Column("release_tag", String, nullable=False),
    Column("release_commit", String, nullable=False),
    Column("digest", String, nullable=False),
    Column("inputs", JSON, nullable=False),
    Column("status", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("outcome", String),
    Column("output", Text),
    Column("error", Text),
    Column("steps", Integer, nullable=False),
    Column("running_step_id", String),
    # "stepped" (a client posts each step) or "background" (the task runs on
    # its own to its end or its next approval); migration 0003 sets "stepped".
    Column("mode", String, nullable=False, server_default="stepped"),
    # How many segments (DBOS workflows) the task has been given: the next one's number.
    Column("segments", Integer, nullable=False, server_default="0"),
    # The last step a background task's POST .../steps has returned.
    Column("delivered", Integer, nullable=False, server_default="0"),
    Index(None, "owner", "created_at", "task_id"),
    Index(None, "created_at", "task_id"),
)

steps = Table(
    "steps",
    METADATA,
    Column("step_id", String, primary_key=True),
    Column("task_id", String, ForeignKey("tasks.task_id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("status", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("name", String),
    Column("input", Text),
    Column("additional_input", JSON, nullable=False),
    Column("output", Text),
    Column("additional_output", _nullable_json()),
    Column("is_last", Boolean, nullable=False),
    Column("finished_at", UTCDateTime),
    # The worker process that ran the step (its DBOS executor id), shown by the UI.
    Column("worker", String),
    # Two steps numbered alike would mean two claims both won.
    Index(None, "task_id", "number", unique=True),
)

# Actions and artifacts name steps without a foreign key: the service decides
# in which order it writes a step and what the step produced.
actions = Table(
    "actions",
    METADATA,
    Column("action_id", String, primary_key=True),
    Column("task_id", String, ForeignKey("tasks.task_id", ondelete="CASCADE"), nullable=False),
    Column("step_id", String, nullable=False),
    Column("key", String, nullable=False),
    Column("agent", String, nullable=False),
    Column("tool", String, nullable=False),
    Column("arguments", JSON, nullable=False),
    Column("thought", Text),
    Column("status", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("decided_by_step_id", String),
    Column("reason", Text),
    Column("edited_arguments", _nullable_json()),
    Index(None, "task_id", "created_at", "action_id"),
)

artifacts = Table(
    "artifacts",
    METADATA,
    Column("artifact_id", String, primary_key=True),
    Column("task_id", String, ForeignKey("tasks.task_id", ondelete="CASCADE"), nullable=False),
    Column("agent_created", Boolean, nullable=False),
    Column("file_name", String, nullable=False),
    Column("relative_path", String),
    Column("content_type", String, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("sha256", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("step_id", String),
    Index(None, "task_id", "created_at", "artifact_id"),
)

# The bytes apart from the metadata, so that listing never reads them.
artifact_data = Table(
    "artifact_data",
    METADATA,
    Column("artifact_id", String, ForeignKey("artifacts.artifact_id", ondelete="CASCADE"), primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

journal = Table(
    "journal",
    METADATA,
    Column("task_id", String, ForeignKey("tasks.task_id", ondelete="CASCADE"), primary_key=True),
    Column("key", String, primary_key=True),
    Column("event", JSON, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
)

task_events = Table(
    "task_events",
    METADATA,
    Column("task_id", String, ForeignKey("tasks.task_id", ondelete="CASCADE"), primary_key=True),
    # 1, 2, 3... per task: the SSE event id a subscriber resumes after (Last-Event-ID).
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("kind", String, nullable=False),
    Column("data", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)
"""What happened to each task, in order: what live subscribers are sent
(``registry.protocol.events`` names the kinds)."""

push_configs = Table(
    "push_configs",
    METADATA,
    Column("config_id", String, primary_key=True),
    Column("task_id", String, ForeignKey("tasks.task_id", ondelete="CASCADE"), primary_key=True),
    Column("owner", String, nullable=False),
    Column("url", Text, nullable=False),
    # The client's own token, sent back with each notification (A2A's ``token``).
    Column("token", Text),
    # A2A's ``authentication`` (schemes and credentials), as the client gave it.
    Column("authentication", _nullable_json()),
    # The key each notification's body is signed with (HMAC-SHA256).
    Column("secret", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)
