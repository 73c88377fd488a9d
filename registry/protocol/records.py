"""What the Agent Protocol service keeps: tasks, steps, actions, artifacts
and each task's run journal, as plain frozen records.

The store (``registry.protocol.store``) reads and writes these; the service
(``registry.protocol.service``) decides what they become; the HTTP layer
(``registry.protocol.api``) turns them into the protocol's JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

LogEntry = tuple[str, Mapping[str, Any]]
"""An entry for a task's event log, not yet numbered: its kind and data."""


@dataclass(frozen=True)
class TaskRecord:
    task_id: str
    owner: str
    """Who created it: a digest of the bearer token (``anonymous`` when the service asks for none)."""
    input: str | None
    additional_input: dict[str, Any]
    agent: str
    """``usecase/name``."""
    release_requested: str
    release_tag: str
    release_commit: str
    digest: str
    inputs: dict[str, Any]
    """The agent's inputs, checked when the task was created."""
    status: str
    """``created``, ``running``, ``waiting_for_input``, ``completed``, ``failed`` or ``cancelled``."""
    created_at: datetime
    updated_at: datetime
    outcome: str | None = None
    """The run's outcome once it is over: ``completed``, ``blocked``, ``exhausted`` or ``failed``."""
    output: str | None = None
    error: str | None = None
    steps: int = 0
    """How many steps the task has had."""
    running_step_id: str | None = None
    mode: str = "stepped"
    """``stepped`` (a client posts each step) or ``background`` (it runs on its own)."""
    segments: int = 0
    """How many segments (workflows) it has been given."""
    delivered: int = 0
    """The last step a background task's ``POST .../steps`` returned."""


@dataclass(frozen=True)
class StepRecord:
    step_id: str
    task_id: str
    number: int
    """1 for the first step of the task."""
    status: str
    """``created``, ``running``, ``completed`` or ``failed``."""
    created_at: datetime
    name: str | None = None
    input: str | None = None
    additional_input: dict[str, Any] = field(default_factory=dict)
    output: str | None = None
    additional_output: dict[str, Any] | None = None
    is_last: bool = False
    finished_at: datetime | None = None
    worker: str | None = None
    """The worker process that ran it (its DBOS executor id), as the UI shows it."""


@dataclass(frozen=True)
class ActionRecord:
    action_id: str
    task_id: str
    step_id: str
    """The step that proposed it."""
    key: str
    """Where the run records the decision (its journal key)."""
    agent: str
    tool: str
    arguments: dict[str, Any]
    thought: str | None
    status: str
    """``pending``, then ``approved``, ``rejected`` or ``edited``."""
    created_at: datetime
    decided_by_step_id: str | None = None
    reason: str | None = None
    edited_arguments: dict[str, Any] | None = None


@dataclass(frozen=True)
class ArtifactRecord:
    artifact_id: str
    task_id: str
    agent_created: bool
    file_name: str
    relative_path: str | None
    content_type: str
    size: int
    sha256: str
    created_at: datetime
    step_id: str | None = None


@dataclass(frozen=True)
class Upload:
    """A file a client gives a task, not yet checked: what ``TaskService``
    stores as one of the task's artifacts (``upload_artifact``, or
    ``create_task``'s ``files``, stored before the task can start)."""

    file_name: str
    relative_path: str | None
    content_type: str | None
    """None: guessed from the name."""
    data: bytes


@dataclass(frozen=True)
class TaskEvent:
    """One entry of a task's event log (``registry.protocol.events`` names the kinds)."""

    task_id: str
    seq: int
    """1 for the task's first event: the SSE ``id`` a subscriber resumes after."""
    kind: str
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class Decision:
    """The user's decision on a pending action, as the store records it."""

    task_id: str
    action_id: str
    key: str
    """Where the run's journal keeps it."""
    status: str
    """``approved``, ``rejected`` or ``edited``."""
    choice: str
    """``approve``, ``reject`` or ``edit``."""
    step_id: str
    """The step that goes on with it."""
    reason: str | None = None
    edited_arguments: dict[str, Any] | None = None

    def journal_event(self) -> dict[str, Any]:
        return {"decision": self.choice, "reason": self.reason, "arguments": self.edited_arguments}


@dataclass(frozen=True)
class Begun:
    """A step a worker started (``TaskStore.begin_step``), with what it runs from."""

    task: TaskRecord
    step: StepRecord
    """Running on the worker; or already over, when the worker before it
    finished it and died before the engine recorded that."""
    journal: dict[str, dict[str, Any]]
    """The task's run journal, by key, as the step began."""


@dataclass(frozen=True)
class StepEnd:
    """What a step leaves, written by ``TaskStore.finish_step`` in one
    transaction: all of it if the task still runs the step, else (the task
    was cancelled meanwhile) ``after_cancel`` alone."""

    step: StepRecord
    """The step as it ended."""
    task: TaskRecord
    """The task after it: its status, outcome, output and error."""
    entries: Sequence[LogEntry]
    """The task's event log entries for it: the step, the task's state, the
    outcome, the action and the files."""
    after_cancel: StepRecord
    """The step as it is kept if the task was cancelled while it ran: with
    no answer, no action, and no file."""
    entries_after_cancel: Sequence[LogEntry]
    artifacts: Sequence[tuple[ArtifactRecord, bytes]] = ()
    """The files the step produced (the answer, tools' outputs), with their bytes."""
    action: ActionRecord | None = None
    """The action the step proposes, pending a decision."""
