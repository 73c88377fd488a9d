"""A task's event log (``registry.protocol.events``) as A2A's stream.

``TaskEvents`` is where entries come from as they are appended. The service
serves it from the process's ``EventHub`` (``registry.protocol.hub``), the
one that feeds the Agent Protocol's SSE route too (``HubEvents``): a stream
is a subscription of the hub, so however many streams follow a task (and
however many follow it over either protocol) the process reads its log
once per poll interval, and a stream whose client stopped reading is
dropped when its bounded buffer is full, as the hub drops any subscriber.
A stream holds no thread while it waits.

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

from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import datetime
from typing import Protocol

from a2a.server.events import Event
from a2a.types import Artifact, Task, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent

from registry.a2a import mapping
from registry.a2a.faults import call
from registry.protocol import events
from registry.protocol.hub import EventHub
from registry.protocol.records import ArtifactRecord, TaskEvent
from registry.protocol.store import TaskStore


class TaskEvents(Protocol):
    """A task's log entries, from where a reader left off."""

    async def position(self, task_id: str) -> int:
        """The number of the task's last entry (0 for none)."""
        ...

    def follow(self, task_id: str, after: int) -> AsyncGenerator[TaskEvent, None]:
        """The entries numbered above ``after``, then each as it is appended,
        until the log's last entry, or until the follower is dropped for
        not taking them (the stream then ends early; its client subscribes
        again). Close it (``contextlib.aclosing``) to stop following."""
        ...


class HubEvents:
    """``TaskEvents`` from ``hub``, the process's poller of ``store``'s task logs.

    The hub must be the one the ASGI application's lifespan runs
    (``registry.protocol.asgi.create_asgi_app(..., hub=hub)``), on the
    event loop the streams are served on."""

    def __init__(self, hub: EventHub, store: TaskStore) -> None:
        self._hub = hub
        self._store = store

    async def position(self, task_id: str) -> int:
        return await call(self._store.last_event, task_id)

    def follow(self, task_id: str, after: int) -> AsyncGenerator[TaskEvent, None]:
        return self._hub.follow(task_id, after)


StatusOf = Callable[[str, datetime], Awaitable[TaskStatus | None]]
"""The A2A status of the task in an internal state since a time (with what
goes with it: its pending action, its error); None for an entry the task has
left behind already, which says nothing to the stream (a wait decided meanwhile)."""
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
            # Stamped when the entry was written, not with the task's last
            # change: a stream read behind the task would show each state
            # at the time of the latest one.
            status = await self._status_of(str(entry.data.get("status")), entry.created_at)
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
