"""The Agent Protocol service: tasks, steps, actions and artifacts over the executor.

Every state change goes through ``registry.protocol.states`` first, and is
written by the store in one transaction. A task pins its agent's release
(tag and commit) when it is created. What runs it is a worker
(``registry.protocol.advance`` on ``registry.runs``): a request that runs
something queues the task's next segment in the same transaction as its
change of state, so only one segment of a task is ever queued or running,
across threads, processes and hosts. A stepped task's ``POST .../steps``
waits for its step; a background task runs on its own, and its ``POST
.../steps`` answers the steps it has run since the last one.

Who may see what: a task belongs to the token that created it; another
token gets ``task-not-found`` for it, never a hint that it exists. Admin
tokens see every task.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.engine import Connection

from registry.client import Agent, RegistryClient
from registry.errors import (
    AgentNotFound,
    ArtifactNotFound,
    ConfigurationError,
    InvalidDefinition,
    InvalidInputs,
    InvalidRequest,
    InvalidState,
    NotReady,
    PayloadTooLarge,
    ReleaseNotFound,
    StepNotFound,
    TaskNotFound,
)
from registry.executor import Executor
from registry.format.definition import check_agent_name
from registry.models import Issue
from registry.protocol.advance import StepRunner, step_id_of
from registry.protocol.outputs import pending_action
from registry.protocol.records import ActionRecord, ArtifactRecord, Decision, StepRecord, TaskRecord, Upload
from registry.protocol.requests import (
    MODES,
    check_bound,
    check_step_input,
    check_task_keys,
    object_member,
    optional_text,
    task_inputs,
    unprocessable,
)
from registry.protocol.requests import content_type as checked_content_type
from registry.protocol.requests import decision as checked_decision
from registry.protocol.requests import file_name as checked_file_name
from registry.protocol.requests import relative_path as checked_relative_path
from registry.protocol.states import NEW, TASK_FINISHED, transition
from registry.protocol.store import TaskStore
from registry.protocol.tasklog import artifact_entry, state_entry
from registry.runs.engine import RunEngine, Segment
from registry.runs.liveness import Sweeper

log = logging.getLogger("registry.protocol")

ANONYMOUS = "anonymous"
_DECIDED = {"approve": "approved", "reject": "rejected", "edit": "edited"}
STEP_WAIT_SECONDS = 10.0
"""How long a background task's ``POST .../steps`` waits for a step to end."""
_POLL_SECONDS = 0.02
_CANCELLABLE = ("created", "queued", "running", "waiting_for_input")
STEP_WAIT_LIMIT = 3600.0
"""The longest a stepped task's request waits for its step (a run's own limits end it sooner)."""


@dataclass(frozen=True)
class Caller:
    """Who sends a request: the owner of what it creates, and whether it may see everything."""

    owner: str
    admin: bool = False

    @classmethod
    def for_token(cls, token: str | None, *, admin: bool = False) -> Caller:
        if token is None:
            return cls(ANONYMOUS, admin)
        # A digest, not the token: the database never holds a credential.
        return cls("token:" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:32], admin)

    @property
    def scope(self) -> str | None:
        """The owner a lookup is limited to; None for an admin."""
        return None if self.admin else self.owner


@dataclass(frozen=True)
class Page:
    number: int
    size: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size


class TaskService:
    def __init__(
        self,
        store: TaskStore,
        executor: Executor,
        registry: RegistryClient,
        engine: RunEngine,
        *,
        default_release: str = "latest",
        max_artifact_bytes: int = 10 * 1024 * 1024,
        step_wait_seconds: float = STEP_WAIT_SECONDS,
    ) -> None:
        self.store = store
        self.executor = executor
        self.registry = registry
        self.engine = engine
        self.default_release = default_release
        self.max_artifact_bytes = max_artifact_bytes
        self.step_wait_seconds = step_wait_seconds
        self.runner = StepRunner(store, executor, registry, max_artifact_bytes=max_artifact_bytes)
        self._sweeper: Sweeper | None = None

    def start(self) -> None:
        """Open the run queue; in a worker, launch DBOS to run tasks from it,
        and look out for the segments of workers that died."""
        self.engine.start(self.runner if self.engine.worker else None)
        if self.engine.worker:
            self._sweeper = Sweeper(self.engine)
            self._sweeper.start()

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.close()
            self._sweeper = None
        self.engine.close()

    # --- tasks ---------------------------------------------------------------------------

    def create_task(self, caller: Caller, body: Mapping[str, Any], *, files: Sequence[Upload] = ()) -> TaskRecord:
        """A new task; ``files`` are stored with it, before a background task
        can start (an upload after creation may come after its first step)."""
        text = optional_text(body, "input")
        extra = object_member(body, "additional_input")
        check_task_keys(extra)
        agent_name = _agent_name(extra.get("agent"))
        release = extra.get("release", self.default_release)
        if not isinstance(release, str) or not release:
            raise unprocessable(
                "additional_input.release must be a version, a range or a channel", "/additional_input/release"
            )
        mode = extra.get("mode", "stepped")
        if mode not in MODES:
            raise unprocessable("additional_input.mode must be stepped or background", "/additional_input/mode")
        agent = self._fetch(agent_name, release, creating=True)
        checked = task_inputs(agent, text, extra.get("inputs"))
        self._check_bound(agent)
        now = _now()
        background = mode == "background"
        task = TaskRecord(
            task_id=str(uuid.uuid4()),
            owner=caller.owner,
            input=text,
            additional_input=dict(extra),
            agent=agent_name,
            release_requested=release,
            release_tag=agent.tag,
            release_commit=agent.commit,
            digest=agent.digest,
            inputs=checked,
            status=transition("task", NEW, "submit" if background else "create").target,
            created_at=now,
            updated_at=now,
            mode=mode,
            segments=1 if background else 0,
        )
        stored = [self._new_file(task.task_id, upload) for upload in files]
        entries = [state_entry(task.status), *(artifact_entry(artifact) for artifact, _ in stored)]
        self.store.create_task(task, files=stored, enqueue=self._enqueue if background else None, entries=entries)
        return task

    def get_task(self, caller: Caller, task_id: str) -> TaskRecord:
        task = self.store.get_task(task_id, owner=caller.scope)
        if task is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return task

    def list_tasks(self, caller: Caller, page: Page) -> tuple[list[TaskRecord], int]:
        return self.store.list_tasks(owner=caller.scope, offset=page.offset, limit=page.size)

    def cancel_task(self, caller: Caller, task_id: str) -> TaskRecord:
        """Cancel the task; a running one stops at its next step."""
        task = self.get_task(caller, task_id)
        target = transition("task", task.status, "cancel").target
        cancelled = replace(task, status=target, updated_at=_now())
        # From any state not over: a worker may move the task on (queued to
        # running, say) between the read above and this write.
        # The state's entry goes with the change: a step that ends after the
        # cancel is logged after it.
        entries = [state_entry(cancelled.status)]
        if not self.store.set_task_status(task_id, from_states=_CANCELLABLE, task=cancelled, entries=entries):
            raise _conflict(self.get_task(caller, task_id), "cancel")
        if task.segments:
            self.engine.cancel(Segment(task_id, task.segments))
        return cancelled

    # --- steps and decisions -------------------------------------------------------------

    def execute_step(self, caller: Caller, task_id: str, body: Mapping[str, Any]) -> StepRecord:
        """A stepped task: queue its next step and wait for it. A background
        task: apply the decision the request carries, and answer the steps
        run since the last request (waiting briefly for one)."""
        task = self.get_task(caller, task_id)
        text = optional_text(body, "input")
        extra = object_member(body, "additional_input")
        check_step_input(extra)
        if task.mode == "background":
            if "decision" in extra:
                self.decide(caller, task_id, extra)
            return self._steps_since_last_call(caller, task_id)
        pending = self.store.pending_action(task_id)
        transition("task", task.status, "step")
        segment = task.segments + 1
        decision = self._decision(task, pending, checked_decision(extra, pending), segment)
        step = StepRecord(
            step_id=step_id_of(task_id, segment, 0),
            task_id=task_id,
            number=0,
            status=transition("step", NEW, "create").target,
            created_at=_now(),
            input=text,
            additional_input=dict(extra),
        )
        queued = self.store.submit(
            task_id,
            owner=caller.scope,
            from_states=("created", "waiting_for_input"),
            segment=segment,
            at=step.created_at,
            enqueue=self._enqueue_one,
            step=step,
            decision=decision,
        )
        if queued is None:
            raise _conflict(self.get_task(caller, task_id), "step")
        if decision is not None:
            self.runner.log.action(self._decided(task_id, decision.action_id))
        self.runner.log.state(queued)
        return self._wait_for_step(task_id, step.step_id)

    def decide(self, caller: Caller, task_id: str, extra: Mapping[str, Any]) -> ActionRecord:
        """The user's decision on a background task's pending action
        (``decision``, ``reason``, ``arguments``): recorded, and the run goes
        on on a worker. 409 when the action was decided meanwhile."""
        task = self.get_task(caller, task_id)
        check_step_input(extra)
        pending = self.store.pending_action(task_id)
        if pending is None or task.status != "waiting_for_input":
            raise InvalidState(
                f"the task is {task.status} with no action pending: there is nothing to decide",
                entity="task",
                state=task.status,
                allowed=[],
            )
        transition("task", task.status, "decide")
        segment = task.segments + 1
        decision = self._decision(task, pending, checked_decision(extra, pending), segment)
        queued = self.store.submit(
            task_id,
            owner=caller.scope,
            from_states=("waiting_for_input",),
            segment=segment,
            at=_now(),
            enqueue=self._enqueue,
            decision=decision,
        )
        if queued is None:
            raise _conflict(self.get_task(caller, task_id), "decide")
        decided = self._decided(task_id, pending.action_id)
        self.runner.log.action(decided)
        self.runner.log.state(queued)
        return decided

    def _decision(
        self, task: TaskRecord, pending: ActionRecord | None, decision: Mapping[str, Any] | None, segment: int
    ) -> Decision | None:
        if decision is None or pending is None:
            return None
        choice = str(decision["decision"])
        transition("action", pending.status, choice)
        edited = decision.get("arguments") if choice == "edit" else None
        if edited is not None:
            problem = self.executor.check_decision(self._pinned(task), pending_action(pending), edited)
            if problem is not None:
                raise InvalidInputs(
                    f"the edited arguments do not fit {pending.tool}: {problem}",
                    [Issue(message=problem, path="/additional_input/arguments")],
                )
        return Decision(
            task_id=task.task_id,
            action_id=pending.action_id,
            key=pending.key,
            status=_DECIDED[choice],
            choice=choice,
            step_id=step_id_of(task.task_id, segment, 0),
            reason=decision.get("reason"),
            edited_arguments=edited,
        )

    def _decided(self, task_id: str, action_id: str) -> ActionRecord:
        return next(a for a in self.store.list_actions(task_id) if a.action_id == action_id)

    def _enqueue(self, connection: Connection, task: TaskRecord) -> None:
        self.engine.enqueue_in(connection, Segment(task.task_id, task.segments))

    def _enqueue_one(self, connection: Connection, task: TaskRecord) -> None:
        self.engine.enqueue_in(connection, Segment(task.task_id, task.segments), max_steps=1)

    def _wait_for_step(self, task_id: str, step_id: str) -> StepRecord:
        """The step once it is over (a stepped task's request waits for its
        step), or as it is after ``STEP_WAIT_LIMIT`` seconds."""
        deadline = time.monotonic() + STEP_WAIT_LIMIT
        while time.monotonic() < deadline:
            step = self.store.get_step(task_id, step_id)
            if step is None:
                raise StepNotFound(f"task {task_id!r} has no step {step_id!r}")
            if step.status in ("completed", "failed"):
                return step
            task = self.store.get_task(task_id, owner=None)
            if task is not None and task.status in TASK_FINISHED and task.running_step_id != step_id:
                # Over (the step ended with the task, read again: it may have ended
                # since it was read above), or cancelled before a worker took it.
                return self.store.get_step(task_id, step_id) or step
            time.sleep(_POLL_SECONDS)
        return self.get_step(Caller(ANONYMOUS, admin=True), task_id, step_id)

    def _steps_since_last_call(self, caller: Caller, task_id: str) -> StepRecord:
        """A background task's latest step that no request has returned yet,
        waiting up to ``step_wait_seconds`` for one; else its running step,
        or its last one. ``additional_output.steps_since_last_call`` lists the
        numbers of the steps that ended since the last call."""
        deadline = time.monotonic() + self.step_wait_seconds
        while True:
            task = self.get_task(caller, task_id)
            steps, _ = self.store.list_steps(task_id, offset=max(task.steps - 100, 0), limit=100)
            new = [s for s in steps if s.number > task.delivered and s.status in ("completed", "failed")]
            idle = task.status not in ("queued", "running")
            if new or idle or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_SECONDS * 5)
        if new:
            latest = new[-1]
            self.store.deliver(task_id, latest.number)
            since = {"steps_since_last_call": [s.number for s in new]}
            return replace(latest, additional_output={**(latest.additional_output or {}), **since})
        if steps:
            return steps[-1]
        raise InvalidState(
            f"the task is {task.status} and no step of it has started yet: ask again shortly",
            entity="task",
            state=task.status,
            allowed=[],
        )

    def get_step(self, caller: Caller, task_id: str, step_id: str) -> StepRecord:
        self.get_task(caller, task_id)
        step = self.store.get_step(task_id, step_id)
        if step is None:
            raise StepNotFound(f"task {task_id!r} has no step {step_id!r}")
        return step

    def list_steps(self, caller: Caller, task_id: str, page: Page) -> tuple[list[StepRecord], int]:
        self.get_task(caller, task_id)
        return self.store.list_steps(task_id, offset=page.offset, limit=page.size)

    def actions(self, caller: Caller, task_id: str) -> list[ActionRecord]:
        self.get_task(caller, task_id)
        return self.store.list_actions(task_id)

    # --- artifacts -----------------------------------------------------------------------

    def upload_artifact(
        self,
        caller: Caller,
        task_id: str,
        *,
        file_name: str,
        data: bytes,
        content_type: str | None,
        relative_path: str | None,
    ) -> ArtifactRecord:
        task = self.get_task(caller, task_id)
        if task.status in TASK_FINISHED:
            raise InvalidState(
                f"the task is {task.status}: it takes no more files", entity="task", state=task.status, allowed=[]
            )
        artifact, _ = self._new_file(task_id, Upload(file_name, relative_path, content_type, data))
        self.store.add_artifact(artifact, data)
        self.runner.log.artifact(artifact)
        return artifact

    def _new_file(self, task_id: str, upload: Upload) -> tuple[ArtifactRecord, bytes]:
        """A client's file, checked (its size, name, path and media type), as the task's new artifact."""
        data = upload.data
        if len(data) > self.max_artifact_bytes:
            raise PayloadTooLarge(f"an artifact may hold at most {self.max_artifact_bytes} bytes")
        name = checked_file_name(upload.file_name)
        transition("artifact", NEW, "upload")
        artifact = ArtifactRecord(
            artifact_id=str(uuid.uuid4()),
            task_id=task_id,
            agent_created=False,
            file_name=name,
            relative_path=checked_relative_path(upload.relative_path),
            content_type=checked_content_type(upload.content_type, name),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at=_now(),
        )
        return artifact, data

    def list_artifacts(self, caller: Caller, task_id: str, page: Page) -> tuple[list[ArtifactRecord], int]:
        self.get_task(caller, task_id)
        return self.store.list_artifacts(task_id, offset=page.offset, limit=page.size)

    def step_artifacts(self, task_id: str, step_id: str) -> list[ArtifactRecord]:
        """The artifacts one step made (of the task's first 1000)."""
        artifacts, _ = self.store.list_artifacts(task_id, offset=0, limit=1000)
        return [a for a in artifacts if a.step_id == step_id]

    def artifact(self, caller: Caller, task_id: str, artifact_id: str) -> tuple[ArtifactRecord, bytes]:
        self.get_task(caller, task_id)
        found = self.store.get_artifact(task_id, artifact_id)
        if found is None:
            raise ArtifactNotFound(f"task {task_id!r} has no artifact {artifact_id!r}")
        return found

    # --- the registry ----------------------------------------------------------------------

    def _fetch(self, name: str, release: str, *, creating: bool = False) -> Agent:
        usecase, _, agent_name = name.partition("/")
        try:
            return self.registry.get(usecase, agent_name, release=release)
        except (AgentNotFound, ReleaseNotFound, InvalidDefinition, InvalidRequest) as exc:
            if not creating:
                raise
            raise unprocessable(f"cannot run {name} at {release}: {exc}", "/additional_input") from exc

    def _pinned(self, task: TaskRecord) -> Agent:
        return self._fetch(task.agent, task.release_tag)

    def _check_bound(self, agent: Agent) -> None:
        """Refuse a task whose tools or retrievers nothing binds (422), before
        its first step would fail on them. A tool provider that cannot start
        is the service's fault, not the request's: 503, and the next request
        tries to start it again."""
        executor = self.executor
        # An MCP server's tools are known once its session has started.
        try:
            executor.start()
        except ConfigurationError as exc:
            raise NotReady(f"the tools of this service cannot start now: {exc.detail}") from exc
        check_bound(agent, executor.toolbox.bound, executor.retrievers, names_every_model=executor.names_every_model)


def _agent_name(named: Any) -> str:
    usecase, slash, name = named.partition("/") if isinstance(named, str) else ("", "", "")
    try:
        if not slash:
            raise InvalidRequest("it is not usecase/name")
        check_agent_name(usecase, name)
    except InvalidRequest as exc:
        raise unprocessable(
            f"additional_input.agent must name the agent to run, as usecase/name: {exc.detail}",
            "/additional_input/agent",
        ) from exc
    return f"{usecase}/{name}"


def _conflict(task: TaskRecord, event: str) -> InvalidState:
    if task.status in ("queued", "running"):
        detail = "another step of this task is queued or running: one step runs at a time"
    else:
        detail = f"the task is {task.status}: it cannot {event}"
    try:
        transition("task", task.status, event, detail=detail)
    except InvalidState as exc:
        return exc
    return InvalidState(detail, entity="task", state=task.status, allowed=[])


def _now() -> datetime:
    return datetime.now(timezone.utc)
