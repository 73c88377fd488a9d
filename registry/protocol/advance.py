"""One step of a task, as a worker runs it: what the run engine calls.

``StepRunner.advance`` is the ``registry.runs.Advance`` of this service:
DBOS calls it for each step of a segment, records what it returns, and
never calls it again for that step once recorded. A worker that dies in it
leaves the step ``running``; the worker that takes the segment over calls
it again, takes the step over (``TaskStore.begin_step``), and the journal
replays what the first one recorded: model replies are not asked again,
and a tool call it had started is reported to the model as interrupted.

Every state it changes is appended to the task's event log, and the run's
text, tool calls and results as they happen (``registry.protocol.tasklog``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from registry.client import Agent, RegistryClient
from registry.errors import NotReady, RegistryError, RegistryUnavailable, RequestTimeout
from registry.executor import Executor
from registry.executor.executor import StepResult
from registry.executor.journal import PendingAction
from registry.protocol import tasklog
from registry.protocol.outputs import action_json, failed_model_call, step_output
from registry.protocol.records import ActionRecord, ArtifactRecord, Begun, LogEntry, StepEnd, StepRecord, TaskRecord
from registry.protocol.requests import content_type as checked_content_type
from registry.protocol.requests import file_name as checked_file_name
from registry.protocol.states import transition
from registry.protocol.store import TaskStore
from registry.protocol.tasklog import LogListener, TaskLog
from registry.runs.engine import Next, while_the_database_is_away

log = logging.getLogger("registry.protocol")

ANSWER_FILE = "answer.md"
CANCELLED_WHILE_RUNNING = "the task was cancelled while this step ran: its answer, files and action are not kept"
RETRIES = 3
"""Times a background task's failed model call is tried again before the
task fails, when the failure is one that may pass (``FailedCall.transient``)."""
_REGISTRY_AWAY = (RegistryUnavailable, NotReady, RequestTimeout)
"""The registry's answers that say "not now" rather than "no such agent"."""


def step_id_of(task_id: str, segment: int, index: int, attempt: int = 0) -> str:
    """The id of step ``index`` of segment ``segment``: the same in every
    worker that runs it, so that one taking it over finds it. A step tried
    again after its model call failed (``attempt``) is a step of its own:
    under the failed step's id it would find that step over, and never run."""
    tried = f":{attempt}" if attempt else ""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"prompt-registry:task:{task_id}:{segment}:{index}{tried}"))


class _StoreJournal:
    """A task's journal as its step began, each event written through to
    the store (and so durable) as it is recorded."""

    def __init__(self, store: TaskStore, task_id: str, events: dict[str, dict[str, Any]]) -> None:
        self._store = store
        self._task_id = task_id
        self._events = events

    def get(self, key: str) -> Mapping[str, Any] | None:
        return self._events.get(key)

    def record(self, key: str, event: Mapping[str, Any]) -> None:
        # Durable when it returns, or not at all: an error here would end
        # the run as failed (the executor's own failures do), not the step.
        while_the_database_is_away(
            lambda: self._store.record_event(self._task_id, key, event), f"the journal of task {self._task_id}"
        )
        self._events[key] = dict(event)


class StepRunner:
    """Runs a task's steps on a worker: fetches its pinned agent, advances
    the run one step from its journal, and writes what the step did.

    A step costs the store three commits besides the run's own journal
    records: its start (with the task's journal and the log's entries), the
    first piece of the answer's text (for live subscribers), and its end
    (the step, the task, the files, the action and the log's entries)."""

    def __init__(
        self,
        store: TaskStore,
        executor: Executor,
        registry: RegistryClient,
        *,
        max_artifact_bytes: int,
        listeners: Sequence[LogListener] = (),
    ) -> None:
        self.store = store
        self.executor = executor
        self.registry = registry
        self.max_artifact_bytes = max_artifact_bytes
        self.log = TaskLog(store, listeners=listeners)

    def advance(self, task_id: str, segment: int, index: int, worker: str, attempt: int) -> Next:
        planned = StepRecord(
            step_id=step_id_of(task_id, segment, index, attempt),
            task_id=task_id,
            number=0,
            status=transition("step", "(new)", "start").target,
            created_at=_now(),
        )
        begun = self.store.begin_step(planned, worker=worker, at=_now(), entries=tasklog.step_started)
        if begun is None:
            return Next.STOP  # over, or cancelled before this step started
        if begun.step.status != "running":  # its worker finished it, then died before DBOS recorded it
            return _after(begun.task, begun.step)
        end = self._run(begun, attempt)
        return self._write_end(end, f"the end of step {index} of task {task_id}")

    def _write_end(self, end: StepEnd, what: str) -> Next:
        """Write the step's end, and say what follows it. The database away
        meanwhile: the end is written again once it is back, not the step
        run again (which would make its next model round live in this step,
        and end it one round later)."""
        tries = 0

        def write() -> Next:
            nonlocal tries
            tries += 1
            if tries > 1:  # the last try may have committed before its connection broke
                written = self._ended_already(end.step.task_id, end.step.step_id)
                if written is not None:
                    return written
            if not self.store.finish_step(end):
                return Next.STOP  # cancelled while the step ran
            return _after(end.task, end.step)

        return while_the_database_is_away(write, what)

    def _ended_already(self, task_id: str, step_id: str) -> Next | None:
        """What follows the step if its end is written already; None if not."""
        task = self.store.get_task(task_id, owner=None)
        step = self.store.get_step(task_id, step_id)
        if task is None or step is None:
            return Next.STOP
        return None if step.status == "running" else _after(task, step)

    def abandon(self, task_id: str, segment: int, index: int, attempt: int, reason: str) -> None:
        """The step raised on every try: it ends failed, and so does a
        background task; a stepped task waits for its next step."""
        log.error("step %d of segment %d of task %s: %s", index, segment, task_id, reason)
        task = self.store.get_task(task_id, owner=None)
        step = self.store.get_step(task_id, step_id_of(task_id, segment, index, attempt))
        if task is None or step is None or step.status not in ("created", "running"):
            return
        if task.status == "queued":  # it never began: the task is freed as begin_step would have
            begun = self.store.begin_step(step, worker=step.worker or "", at=_now())
            if begun is None:
                return
            task, step = begun.task, begun.step
        reason = "an internal error of the service stopped the step; it has been logged"
        self.store.finish_step(self._failed(task, step, reason, attempt=attempt, transient=False))

    def _run(self, begun: Begun, attempt: int) -> StepEnd:
        task, step = begun.task, begun.step
        # The database away while it records: the engine tries the step again.
        journal = _StoreJournal(self.store, task.task_id, begun.journal)
        sink = self.log.sink(task.task_id, step.step_id)
        try:
            result: StepResult | RegistryError = self.executor.step(
                self._pinned(task), task.inputs, journal=journal, sink=sink
            )
        except RegistryError as exc:
            result = exc
        finally:
            streamed = sink.end()  # the answer's last text: written with the step's end
        if isinstance(result, RegistryError):
            # The registry could not give the pinned agent: the step fails,
            # and the task can try again if the registry may answer later.
            log.warning("step %s of task %s failed: %s", step.step_id, task.task_id, result)
            transient = isinstance(result, _REGISTRY_AWAY)
            return self._failed(task, step, str(result), attempt=attempt, transient=transient, streamed=streamed)
        failed = failed_model_call(result)
        if failed is not None:
            # Nothing was journaled for the call: the next step makes it again,
            # and replays everything before it.
            log.warning("step %s of task %s failed: %s", step.step_id, task.task_id, failed.error)
            return self._failed(
                task,
                step,
                failed.error,
                attempt=attempt,
                transient=failed.transient,
                additional=step_output(task, result.run_trace),
                streamed=streamed,
            )
        return self._finish(task, step, result, streamed)

    def _finish(self, task: TaskRecord, step: StepRecord, result: StepResult, streamed: list[LogEntry]) -> StepEnd:
        trace = result.run_trace
        additional = step_output(task, trace)
        after_cancel = _ended_after_cancel(step, additional)
        now = _now()
        action = None if result.action is None else _proposed(step, result.action)
        if action is not None:
            additional["action"] = action_json(action)
        finished_task = replace(task, running_step_id=None, updated_at=now)
        files: dict[str, tuple[ArtifactRecord, bytes]] = {}
        if result.is_last and result.result is not None:
            run = result.result
            additional["outcome"] = run.outcome
            if run.error:
                additional["error"] = run.error
            if run.warnings:
                # Parallel branches whose replies did not fit their schema.
                additional["warnings"] = list(run.warnings)
            event = "complete" if run.outcome in ("completed", "blocked") else "fail"
            finished_task = replace(
                finished_task,
                status=transition("task", "running", event).target,
                outcome=run.outcome,
                output=run.output,
                error=run.error,
            )
            if run.output:
                _add_file(files, step, ANSWER_FILE, run.output.encode("utf-8"), "text/markdown; charset=utf-8")
        elif task.mode != "background" or result.action is not None:
            finished_task = replace(finished_task, status=transition("task", "running", "pause").target)
        for span in trace.spans("execute_tool"):
            if not span.attributes.get("registry.replayed"):
                self._tool_file(files, step, span.attributes.get("registry.tool.output"))
        finished = replace(
            step,
            status=transition("step", "running", "finish").target,
            output=result.output,
            additional_output=additional,
            is_last=result.is_last,
            finished_at=now,
        )
        made = [*([] if action is None else [tasklog.action_entry(action)]),
                *(tasklog.artifact_entry(artifact) for artifact, _ in files.values())]  # fmt: skip
        return StepEnd(
            step=finished,
            task=finished_task,
            entries=[*streamed, *made, *tasklog.step_finished(finished, finished_task)],
            after_cancel=after_cancel,
            entries_after_cancel=[*streamed, *tasklog.step_ended_after_cancel(after_cancel)],
            artifacts=list(files.values()),
            action=action,
        )

    def _failed(
        self,
        task: TaskRecord,
        step: StepRecord,
        reason: str,
        *,
        attempt: int,
        transient: bool = True,
        additional: Mapping[str, Any] | None = None,
        streamed: Sequence[LogEntry] = (),
    ) -> StepEnd:
        """The step fails. A stepped task waits for the next step, which goes
        on from what the journal holds; a background task is tried again by
        its segment when the failure is ``transient``, and fails when it is
        not or after ``RETRIES`` more tries."""
        now = _now()
        waiting = replace(task, running_step_id=None, updated_at=now)
        if task.mode != "background":
            waiting = replace(waiting, status=transition("task", "running", "interrupt").target)
            reason = f"{reason}; the task can go on: post a new step to try the call again"
        elif attempt >= RETRIES or not transient:
            waiting = replace(
                waiting, status=transition("task", "running", "fail").target, outcome="failed", error=reason
            )
        failed = replace(
            step,
            status=transition("step", "running", "fail").target,
            additional_output={**(additional or {}), "state": "failed", "error": reason},
            finished_at=now,
        )
        after_cancel = _ended_after_cancel(step, additional or {})
        return StepEnd(
            step=failed,
            task=waiting,
            entries=[*streamed, *tasklog.step_finished(failed, waiting)],
            after_cancel=after_cancel,
            entries_after_cancel=[*streamed, *tasklog.step_ended_after_cancel(after_cancel)],
        )

    def _tool_file(self, files: dict[str, tuple[ArtifactRecord, bytes]], step: StepRecord, output: Any) -> None:
        """A tool's output that is a file (``{"artifact": {"file_name", "content",
        "content_type"?}}``) becomes an artifact of the step."""
        if not isinstance(output, str) or not output.startswith('{"artifact"'):
            return
        try:
            artifact = json.loads(output)["artifact"]
            name = checked_file_name(str(artifact["file_name"]))
            content = str(artifact["content"]).encode("utf-8")
        except (ValueError, KeyError, TypeError, RegistryError):
            return  # not a file after all: the output stays an observation only
        if len(content) <= self.max_artifact_bytes:
            _add_file(files, step, name, content, checked_content_type(artifact.get("content_type"), name))

    def _pinned(self, task: TaskRecord) -> Agent:
        usecase, _, name = task.agent.partition("/")
        return self.registry.get(usecase, name, release=task.release_tag)


def _after(task: TaskRecord, step: StepRecord) -> Next:
    """Whether the segment goes on after ``step``, which left ``task`` so."""
    if task.status != "running" or task.mode != "background" or step.is_last:
        return Next.STOP
    if step.status == "failed":
        return Next.RETRY
    return Next.CONTINUE


def _ended_after_cancel(step: StepRecord, additional: Mapping[str, Any]) -> StepRecord:
    """``step`` as it is kept when its task was cancelled while it ran: failed,
    and the task's last, with its trace and usage but no answer, no
    action and no file (the state table's ``running`` ``cancel``)."""
    return replace(
        step,
        status=transition("step", "running", "fail").target,
        output=None,
        additional_output={**additional, "state": "failed", "error": CANCELLED_WHILE_RUNNING},
        is_last=True,
        finished_at=_now(),
    )


def _proposed(step: StepRecord, proposed: PendingAction) -> ActionRecord:
    return ActionRecord(
        action_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{step.step_id}:{proposed.key}")),
        task_id=step.task_id,
        step_id=step.step_id,
        key=proposed.key,
        agent=proposed.agent,
        tool=proposed.tool,
        arguments=proposed.arguments,
        thought=proposed.thought,
        status=transition("action", "(new)", "propose").target,
        created_at=_now(),
    )


def _add_file(
    files: dict[str, tuple[ArtifactRecord, bytes]], step: StepRecord, name: str, data: bytes, content_type: str
) -> None:
    """An artifact of the step, named ``name``, unless it has one so named already."""
    transition("artifact", "(new)", "produce")
    artifact = ArtifactRecord(
        artifact_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{step.step_id}:artifact:{name}")),
        task_id=step.task_id,
        agent_created=True,
        file_name=name,
        relative_path=None,
        content_type=content_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        created_at=_now(),
        step_id=step.step_id,
    )
    files.setdefault(artifact.artifact_id, (artifact, data))


def _now() -> datetime:
    return datetime.now(timezone.utc)
