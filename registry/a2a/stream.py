"""A task's event log (``registry.protocol.events``) as A2A's stream.

``TaskEvents`` is where entries come from as they are appended: ``PolledLog``
reads the store, waiting ``interval`` between empty reads and holding no
thread while it waits (a read runs in a worker thread for its duration
only). The service's SSE hub can stand in for it, with the same two calls.

``Translation`` turns each entry into A2A's events, reading what an entry
only names: a ``state`` entry becomes a ``TaskStatusUpdateEvent`` (with the
pending action when the task waits, or its error when it failed), an
``artifact`` entry a ``TaskArtifactUpdateEvent``, ``text``, ``tool_call``
and ``tool_result`` entries ``working`` updates with a message. ``step``,
``action`` and ``outcome`` entries say nothing a client of A2A does not
get from those. The contract this relies on: a pending action's row is
stored before the ``state`` entry that says the task waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from a2a.server.events import Event
from a2a.types import Artifact, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent

from registry.a2a import mapping
from registry.protocol import events
from registry.protocol.records import ArtifactRecord, TaskEvent
from registry.protocol.store import TaskStore

POLL_SECONDS = 0.25
BATCH = 200


class TaskEvents(Protocol):
    """A task's log entries, from where a reader left off."""

    async def position(self, task_id: str) -> int:
        """The number of the task's last entry (0 for none)."""
        ...

    def follow(self, task_id: str, after: int) -> AsyncIterator[TaskEvent]:
        """The entries numbered above ``after``, then each as it is appended, without end."""
        ...


class PolledLog:
    """``TaskEvents`` over the store, read every ``interval`` seconds while nothing is new."""

    def __init__(self, store: TaskStore, *, interval: float = POLL_SECONDS, batch: int = BATCH) -> None:
        self._store = store
        self._interval = interval
        self._batch = batch

    async def position(self, task_id: str) -> int:
        after = 0
        while True:
            page = await asyncio.to_thread(self._store.events_after, task_id, after, limit=self._batch)
            if not page:
                return after
            after = page[-1].seq

    async def follow(self, task_id: str, after: int) -> AsyncIterator[TaskEvent]:
        while True:
            page = await asyncio.to_thread(self._store.events_after, task_id, after, limit=self._batch)
            for entry in page:
                yield entry
                after = entry.seq
            if len(page) < self._batch:
                await asyncio.sleep(self._interval)


StatusOf = Callable[[str], Awaitable[TaskStatus | None]]
"""The A2A status of the task in an internal state (with what goes with it:
its pending action, its error); None for an entry the task has left behind
already, which says nothing to the stream (a wait decided meanwhile)."""
ArtifactOf = Callable[[str], Awaitable[tuple[ArtifactRecord, Artifact] | None]]
"""One of the task's files by id, as A2A shows it; None when it is gone."""


class Translation:
    """The A2A events of one task's entries."""

    def __init__(self, task_id: str, *, status_of: StatusOf, artifact_of: ArtifactOf) -> None:
        self._task_id = task_id
        self._status_of = status_of
        self._artifact_of = artifact_of

    async def events(self, entry: TaskEvent) -> list[Event]:
        if entry.kind == events.STATE:
            status = await self._status_of(str(entry.data.get("status")))
            return [] if status is None else [mapping.status_update(self._task_id, status, seq=entry.seq)]
        if entry.kind == events.ARTIFACT:
            found = await self._artifact_of(str(entry.data.get("artifact_id")))
            return [] if found is None else [mapping.artifact_update(self._task_id, found[1], seq=entry.seq)]
        progress = mapping.progress_update(entry)
        return [] if progress is None else [progress]


def pauses(event: Event) -> bool:
    """Whether a stream ends after ``event``: the task is over, or waits for its client."""
    if isinstance(event, TaskStatusUpdateEvent | Task):
        return event.status.state in mapping.TERMINAL | mapping.INTERRUPTED
    return not isinstance(event, TaskArtifactUpdateEvent)
