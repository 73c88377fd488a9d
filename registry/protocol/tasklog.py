"""Writing a task's event log: what live subscribers are sent
(``registry.protocol.events`` names the kinds and their data).

- ``TaskLog``: the entries the service appends where it changes a task
  (a step is queued, an action is decided, a file is uploaded, the task is
  created), one call per place. The entries of one change are appended in
  one transaction.
- ``step_started``, ``step_finished``, ``step_ended_after_cancel``,
  ``action_entry``, ``artifact_entry``, ``state_entry``: the entries the
  store writes in the transaction that makes the change they tell of (a
  step's start and end: ``TaskStore.begin_step``, ``TaskStore.finish_step``;
  a cancel: ``TaskStore.set_task_status``). A reader sees a finished task's
  ``state``, ``outcome``, answer and action together with the rows they
  describe, a cancel before the end of the step it interrupted, and never
  the answer of a step that lost the race with a cancel.
- ``EventLogSink``: a step's run events as they happen (the executor's
  ``sink``), written as ``text``, ``tool_call`` and ``tool_result``
  entries by a thread of its own, so that the executor's event loop never
  waits for the database. The answer's text arrives a few characters at a
  time; its first piece is written at once, and the pieces after it are
  joined into one entry until ``flush_chars`` characters or
  ``flush_seconds`` have gathered, so that a long answer is tens of rows,
  not thousands.
- ``LogListener``: told of the entries this process appended to a log
  (``TaskStore.on_appended``), once committed (``registry.a2a.pushnotifier`` sends push
  notifications of them), on the writer's thread: a listener takes them
  and returns at once. The run's own events (``EventLogSink``) are not
  told: they are the stream's, not a change of the task.

Appending apart from a step's start and end is best effort: the log is for
watching a task, not its record. A database failure is logged and the
entry lost; the step goes on, and what it did is still in its step, action
and artifact rows.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from registry.errors import RegistryError
from registry.executor.events import Event, TextEvent, ToolCallEvent, ToolResultEvent
from registry.protocol import events
from registry.protocol.outputs import action_json
from registry.protocol.records import ActionRecord, ArtifactRecord, LogEntry, StepRecord, TaskEvent, TaskRecord
from registry.protocol.states import TASK_FINISHED
from registry.protocol.store import TaskStore

log = logging.getLogger("registry.protocol")

FLUSH_SECONDS = 0.05
"""How long the answer's text gathers before it is written."""
FLUSH_CHARS = 4096
"""How much of it gathers at most before it is written."""

Entry = LogEntry

_RUN_EVENTS = frozenset({events.TEXT, events.TOOL_CALL, events.TOOL_RESULT})
"""What a run streams as it goes (``EventLogSink``'s kinds): not changes of the task."""


class LogListener(Protocol):
    """Told of the entries a ``TaskLog`` of this process appended."""

    def appended(self, entries: Sequence[TaskEvent]) -> None:
        """``entries`` of one task, just committed, in order (their
        ``created_at`` is when they were written). Called on the
        writer's thread, a step's among them: take them and return at once.
        An exception is logged and goes no further."""

    def close(self) -> None:
        """The service closes: its steps are over, nothing more is appended."""


class TaskLog:
    """The entries the service appends to a task's log where it changes the task."""

    def __init__(self, store: TaskStore, *, listeners: Sequence[LogListener] = ()) -> None:
        self._store = store
        self._listeners = tuple(listeners)
        if self._listeners:
            # The store tells of every append once committed, a step's start
            # and end among them, which it writes with the step itself.
            store.on_appended(self._tell)

    def sink(self, task_id: str, step_id: str) -> EventLogSink:
        """Where the run's events of this step go; end or close it once the step ends."""
        return EventLogSink(self._store, task_id, step_id)

    def action(self, action: ActionRecord) -> None:
        """``action`` was proposed, or decided."""
        self._append(action.task_id, [action_entry(action)])

    def artifact(self, artifact: ArtifactRecord) -> None:
        self._append(artifact.task_id, [artifact_entry(artifact)])

    def state(self, task: TaskRecord, reason: str | None = None) -> None:
        """The task is in a new state (queued for its next step, say)."""
        self._append(task.task_id, [state_entry(task.status, reason)])

    def _append(self, task_id: str, entries: Sequence[Entry]) -> None:
        try:
            self._store.append_events(task_id, entries)
        except RegistryError as exc:
            log.warning("could not append %s to the event log of task %s: %s", _kinds(entries), task_id, exc)

    def _tell(self, appended: Sequence[TaskEvent]) -> None:
        # The run's own events (text, tool calls) are the stream's, not a
        # change of the task: the listeners hear of the rest.
        changes = [entry for entry in appended if entry.kind not in _RUN_EVENTS]
        if not changes:
            return
        for listener in self._listeners:
            try:
                listener.appended(changes)
            except Exception:
                # A listener's bug must not fail the step that changed the task.
                log.exception("a listener of task %s's event log failed", changes[0].task_id)


# The entries a step's start and end write with the step itself, in the same
# transaction (``TaskStore.begin_step``, ``TaskStore.finish_step``).


def step_started(task: TaskRecord, step: StepRecord, was: str) -> list[Entry]:
    """``task``, which was ``was``, is running ``step`` now (as the claim
    left them): its state only when that changed (a background task's next
    step, or a step taken over, starts on a task already running)."""
    started = (events.STEP, _step(step))
    return [started] if was == task.status else [state_entry(task.status), started]


def step_finished(step: StepRecord, task: TaskRecord) -> list[Entry]:
    """``step`` ended, leaving ``task`` so: the step, the task's state and,
    when the run is over, its outcome (the task's last entry). A background
    task that goes on is still ``running``: its state is told again only
    with the error of a failed step, which its next try follows."""
    additional = step.additional_output or {}
    entries: list[Entry] = [(events.STEP, {**_step(step), "output": step.output, "error": additional.get("error")})]
    if step.status == "failed":
        entries.append(state_entry(task.status, additional.get("error")))
    elif task.status != "running":
        entries.append(state_entry(task.status))
    if task.status in TASK_FINISHED and task.outcome is not None:
        entries.append((events.OUTCOME, {"outcome": task.outcome, "output": task.output, "error": task.error}))
    return entries


def step_ended_after_cancel(step: StepRecord) -> list[Entry]:
    """``step`` ended after its task was cancelled: the step alone (the
    cancel logged the task's last state)."""
    additional = step.additional_output or {}
    return [(events.STEP, {**_step(step), "output": step.output, "error": additional.get("error")})]


def action_entry(action: ActionRecord) -> Entry:
    return events.ACTION, action_json(action)


def artifact_entry(artifact: ArtifactRecord) -> Entry:
    data = {
        "artifact_id": artifact.artifact_id,
        "file_name": artifact.file_name,
        "agent_created": artifact.agent_created,
        "size": artifact.size,
        "step_id": artifact.step_id,
    }
    return events.ARTIFACT, data


class EventLogSink:
    """A step's run events into its task's log (``Executor.step(sink=...)``):
    ``put`` hands an event over at once; a thread writes it. ``close`` writes
    what is left and waits until it is written; ``end`` hands it back
    instead, for the step's end to write in its own transaction."""

    def __init__(
        self,
        store: TaskStore,
        task_id: str,
        step_id: str,
        *,
        flush_seconds: float = FLUSH_SECONDS,
        flush_chars: int = FLUSH_CHARS,
    ) -> None:
        self._store = store
        self.task_id = task_id
        self.step_id = step_id
        self._flush_seconds = flush_seconds
        self._flush_chars = flush_chars
        self._events: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._wrote_text = False
        self._left: list[Entry] = []
        """What the thread had gathered and not written when it stopped (``end``)."""
        self._keep_left = False
        self._call_ids: dict[int, str | None] = {}
        """A tool call's id by its span, for its result (whose event has none)."""
        self._thread = threading.Thread(target=self._write, name=f"event-log-{step_id[:8]}", daemon=True)
        self._thread.start()

    def put(self, event: Event) -> None:
        self._events.put(event)

    def close(self) -> None:
        self._events.put(None)
        self._thread.join()

    def end(self) -> list[Entry]:
        """Stop, and return the entries not written yet (the answer's last
        text) rather than write them: the step's end writes them with its
        own, one commit fewer."""
        self._keep_left = True
        self.close()
        return self._left

    def __enter__(self) -> EventLogSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write(self) -> None:
        text = _Text()
        while True:
            wait = None if text.empty else max(0.0, text.since + self._flush_seconds - time.monotonic())
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                self._flush(text)
                continue
            if event is None:
                if self._keep_left and not text.empty:
                    self._left.append(self._text_entry(text))
                else:
                    self._flush(text)
                return
            if isinstance(event, TextEvent):
                if not text.empty and text.agent != event.agent:
                    self._flush(text)
                text.add(event)
                # The first piece goes at once (a subscriber sees the answer
                # start as soon as it can); the rest gather.
                if text.size >= self._flush_chars or not self._wrote_text:
                    self._flush(text)
                continue
            entry = self._entry(event)
            if entry is not None:
                # In the order things happened: the text before the call first.
                self._flush(text)
                self._append([entry])

    def _entry(self, event: Event) -> Entry | None:
        if isinstance(event, ToolCallEvent):
            self._call_ids[event.span_id] = event.call_id
            data = {"agent": event.agent, "tool": event.tool, "call_id": event.call_id, "arguments": event.arguments}
            return events.TOOL_CALL, {"step_id": self.step_id, **data}
        if isinstance(event, ToolResultEvent):
            failed = event.status != "ok"
            return events.TOOL_RESULT, {
                "step_id": self.step_id,
                "agent": event.agent,
                "tool": event.tool,
                "call_id": self._call_ids.pop(event.span_id, None),
                "status": event.status,
                "output": event.output,
                "error": event.status if failed else None,
            }
        return None  # parses, gates and spans stay in the step's trace

    def _flush(self, text: _Text) -> None:
        if not text.empty:
            self._wrote_text = True
            self._append([self._text_entry(text)])

    def _text_entry(self, text: _Text) -> Entry:
        return events.TEXT, {"step_id": self.step_id, "agent": text.agent, "delta": text.take()}

    def _append(self, entries: Sequence[Entry]) -> None:
        try:
            self._store.append_events(self.task_id, entries)
        except RegistryError as exc:
            log.warning("could not append %s to the event log of task %s: %s", _kinds(entries), self.task_id, exc)


class _Text:
    """The answer's text gathered since the last write, of one agent."""

    def __init__(self) -> None:
        self.agent = ""
        self.since = 0.0
        self.size = 0
        self._pieces: list[str] = []

    @property
    def empty(self) -> bool:
        return not self._pieces

    def add(self, event: TextEvent) -> None:
        if not self._pieces:
            self.agent, self.since = event.agent, time.monotonic()
        self._pieces.append(event.text)
        self.size += len(event.text)

    def take(self) -> str:
        joined = "".join(self._pieces)
        self._pieces, self.size = [], 0
        return joined


def state_entry(status: str, reason: str | None = None) -> Entry:
    """The task is in state ``status`` now (``reason``: why a step failed, say)."""
    return events.STATE, {"status": status, "reason": reason}


def _step(step: StepRecord) -> dict[str, Any]:
    return {"step_id": step.step_id, "number": step.number, "status": step.status, "worker": step.worker}


def _kinds(entries: Sequence[Entry]) -> str:
    return ", ".join(kind for kind, _ in entries)
