"""Tasks stored as a test needs them, with no service to create them: to
hang push notification configurations on (a task store holding tasks of the
owners a test names), or to append event log entries to."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from registry.protocol.records import TaskRecord
from registry.protocol.store import TaskStore

CREATED = datetime(2026, 5, 9, 12, 0, tzinfo=timezone.utc)


def add_task(store: TaskStore, task_id: str, *, owner: str = "anonymous", **changes: Any) -> str:
    """A task of ``owner``, ``created``, in ``store``, with ``changes`` to
    its other fields (a status, a mode); its id."""
    store.create_task(
        replace(
            TaskRecord(
                task_id=task_id,
                owner=owner,
                input="summarise the ticket",
                additional_input={},
                agent="support/triage",
                release_requested="latest",
                release_tag="v1.0.0",
                release_commit="0" * 40,
                digest="sha256:" + "ab" * 32,
                inputs={},
                status="created",
                created_at=CREATED,
                updated_at=CREATED,
            ),
            **changes,
        )
    )
    return task_id


def task_store_with(url: str, tasks: dict[str, str]) -> TaskStore:
    """A task store at ``url`` (migrated on opening) holding a task per
    entry of ``tasks``: its id, and its owner."""
    store = TaskStore(url)
    for task_id, owner in tasks.items():
        add_task(store, task_id, owner=owner)
    return store
