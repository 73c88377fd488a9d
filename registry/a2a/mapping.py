"""Our tasks, actions, artifacts and event-log entries as A2A's types.

Pure functions: what they need is handed in (the pending action, an
artifact's bytes), so the one state machine (``registry.protocol.states``)
reads the same through A2A as through the Agent Protocol. The states map so:

=====================  ==================
internal               A2A ``TaskState``
=====================  ==================
``created``            ``submitted``
``queued``             ``submitted``
``running``            ``working``
``waiting_for_input``  ``input-required``
``completed``          ``completed``
``failed``             ``failed``
``cancelled``          ``canceled``
``rejected``           ``rejected``
=====================  ==================

A task waiting with a pending action carries it in its status message, as
a data part ``{"action": {"action_id", "agent", "tool", "arguments",
"thought"}}`` after a line of text saying what is asked. A task's
``contextId`` is its id: each task is a context of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.struct_pb2 import Struct, Value
from google.protobuf.timestamp_pb2 import Timestamp

from registry.protocol import events
from registry.protocol.records import ActionRecord, ArtifactRecord, TaskEvent, TaskRecord

ANSWER_FILE = "answer.md"
"""The run's final answer, as the service stores it: served as a text part."""
INLINE_BYTES = 64 * 1024
"""A file up to this size travels in an answer as bytes; a larger one as a URL to fetch."""

STATES: Mapping[str, TaskState] = {
    "created": TaskState.TASK_STATE_SUBMITTED,
    "queued": TaskState.TASK_STATE_SUBMITTED,
    "running": TaskState.TASK_STATE_WORKING,
    "waiting_for_input": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
    "rejected": TaskState.TASK_STATE_REJECTED,
}
TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
"""States in which a task waits for its client: a stream pauses there."""


def a2a_state(status: str) -> TaskState:
    """The A2A state of an internal one; ``ValueError`` for a state this
    module does not know (a new one needs a row in ``STATES``)."""
    try:
        return STATES[status]
    except KeyError:
        raise ValueError(f"no A2A state for the task state {status!r}: add it to registry.a2a.mapping.STATES") from None


def task_status(
    status: str,
    *,
    updated_at: datetime,
    pending: ActionRecord | None = None,
    error: str | None = None,
) -> TaskStatus:
    """A task's A2A status: its state, when it got there, and a message when
    the client has something to read (the pending action, the error)."""
    state = a2a_state(status)
    found = TaskStatus(state=state, timestamp=_timestamp(updated_at))
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        found.message.CopyFrom(_waiting_message(pending))
    elif error and state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED):
        found.message.CopyFrom(agent_message([Part(text=error)]))
    return found


def _waiting_message(pending: ActionRecord | None) -> Message:
    if pending is None:
        # A task stepped through the Agent Protocol waits for its next step.
        return agent_message([Part(text="The task waits for its next step (POST .../steps of the Agent Protocol).")])
    asked = f"{pending.agent} wants to call {pending.tool}: approve, reject (with a reason) or edit its arguments."
    return agent_message([Part(text=asked), action_part(pending)])


def action_part(action: ActionRecord) -> Part:
    """The pending tool call, as a data part."""
    return data_part(
        {
            "action": {
                "action_id": action.action_id,
                "agent": action.agent,
                "tool": action.tool,
                "arguments": action.arguments,
                "thought": action.thought,
            }
        }
    )


def artifact(record: ArtifactRecord, data: bytes | None, *, url: str) -> Artifact:
    """One of a task's files: the run's answer as a text part; any other file
    as its bytes when ``data`` is given, else as ``url`` to fetch it from."""
    if record.agent_created and record.file_name == ANSWER_FILE and data is not None:
        part = Part(text=data.decode("utf-8", errors="replace"))
    elif data is not None:
        part = Part(raw=data)
    else:
        part = Part(url=url)
    part.filename = record.file_name
    part.media_type = record.content_type
    found = Artifact(artifact_id=record.artifact_id, name=record.file_name, parts=[part])
    found.metadata.update(
        {
            "agent_created": record.agent_created,
            "size": record.size,
            "sha256": record.sha256,
            "relative_path": record.relative_path,
            "step_id": record.step_id,
        }
    )
    return found


def inline(record: ArtifactRecord) -> bool:
    """Whether the file travels as its bytes (the answer always), not as a link."""
    return record.size <= INLINE_BYTES or (record.agent_created and record.file_name == ANSWER_FILE)


def artifact_path(record: ArtifactRecord) -> str:
    """Where the Agent Protocol serves the file's bytes, below the service's address."""
    return f"/ap/v1/agent/tasks/{record.task_id}/artifacts/{record.artifact_id}"


def task(record: TaskRecord, status: TaskStatus, artifacts: list[Artifact]) -> Task:
    """The task as A2A shows it, with what it pins in its metadata."""
    found = Task(id=record.task_id, context_id=record.task_id, status=status, artifacts=artifacts)
    found.metadata.update(
        {
            "agent": record.agent,
            "release": {
                "requested": record.release_requested,
                "tag": record.release_tag,
                "commit": record.release_commit,
            },
            "digest": record.digest,
            "mode": record.mode,
            "outcome": record.outcome,
        }
    )
    return found


def status_update(task_id: str, status: TaskStatus, *, seq: int) -> TaskStatusUpdateEvent:
    """A change of state, numbered as the event log numbers it."""
    update = TaskStatusUpdateEvent(task_id=task_id, context_id=task_id, status=status)
    update.metadata.update({"seq": seq, "kind": events.STATE})
    return update


def artifact_update(task_id: str, stored: Artifact, *, seq: int) -> TaskArtifactUpdateEvent:
    """A file stored: the whole file, in one chunk."""
    update = TaskArtifactUpdateEvent(task_id=task_id, context_id=task_id, artifact=stored, last_chunk=True)
    update.metadata.update({"seq": seq, "kind": events.ARTIFACT})
    return update


def progress_update(entry: TaskEvent) -> TaskStatusUpdateEvent | None:
    """What the run does while it works, as a ``working`` status with a
    message: model text as a text part, a tool call or its result as a data
    part (``{"tool_call": ...}``, ``{"tool_result": ...}``). None for the
    entries that are not progress (states, steps, actions, artifacts, outcomes)."""
    data = entry.data
    if entry.kind == events.TEXT:
        parts = [Part(text=str(data.get("delta") or ""))]
    elif entry.kind in (events.TOOL_CALL, events.TOOL_RESULT):
        parts = [data_part({entry.kind: {key: value for key, value in data.items() if key != "step_id"}})]
    else:
        return None
    status = TaskStatus(
        state=TaskState.TASK_STATE_WORKING, message=agent_message(parts), timestamp=_timestamp(entry.created_at)
    )
    update = TaskStatusUpdateEvent(task_id=entry.task_id, context_id=entry.task_id, status=status)
    update.metadata.update({"seq": entry.seq, "kind": entry.kind, "agent": data.get("agent")})
    return update


def agent_message(parts: list[Part]) -> Message:
    # Derived from what it says: the same message, sent twice, has one id.
    message = Message(role=Role.ROLE_AGENT, parts=parts)
    message.message_id = "msg-" + _digest(message.SerializeToString(deterministic=True))
    return message


def data_part(data: Mapping[str, Any]) -> Part:
    value = Value()
    value.struct_value.update(dict(data))
    return Part(data=value, media_type="application/json")


def plain(value: Value) -> Any:
    """A protobuf ``Value`` as plain JSON values. JSON has one kind of
    number and protobuf carries each as a double: a whole one is an int here,
    so that ``3`` renders as ``3``, not ``3.0``."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_plain(value.struct_value)
    if kind == "list_value":
        return [plain(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() and abs(number) < 2**53 else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def struct_plain(struct: Struct) -> dict[str, Any]:
    return {key: plain(item) for key, item in struct.fields.items()}


def _timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]
