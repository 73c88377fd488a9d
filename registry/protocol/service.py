"""The Agent Protocol service: tasks, steps, actions and artifacts over the executor.

Every state change goes through ``registry.protocol.states`` first, and is
written by the store in one transaction. A task pins its agent's release
(tag and commit) when it is created; each step fetches the agent at that
exact tag (the client keeps it, so a registry that goes away mid-task does
not stop it) and advances the run by one step, replaying the task's journal
(``registry.executor.journal``). Only one step of a task runs at a time,
across threads and replicas: the store's claim is atomic.

Who may see what: a task belongs to the token that created it; another
token gets ``task-not-found`` for it, never a hint that it exists. Admin
tokens see every task.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

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
    RegistryError,
    ReleaseNotFound,
    StepNotFound,
    TaskNotFound,
)
from registry.executor import Executor
from registry.executor.executor import StepResult
from registry.executor.journal import PendingAction
from registry.format.definition import check_agent_name
from registry.models import Issue
from registry.protocol.outputs import action_json, failed_model_call, pending_action, step_output
from registry.protocol.records import ActionRecord, ArtifactRecord, StepRecord, TaskRecord
from registry.protocol.requests import (
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
from registry.protocol.states import TASK_FINISHED, transition
from registry.protocol.store import TaskStore
from registry.protocol.tasklog import TaskLog, worker_id

log = logging.getLogger("registry.protocol")

ANONYMOUS = "anonymous"
HEARTBEAT_SECONDS = 5.0
"""How often a runner says it is alive."""
STALE_SECONDS = 30.0
"""A runner not seen for this long is gone, and its running steps are failed."""
RECOVER_EVERY = 6
"""Heartbeats between two looks for the steps of runners that are gone."""
_DECIDED = {"approve": "approved", "reject": "rejected", "edit": "edited"}
ANSWER_FILE = "answer.md"


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


class _StoreJournal:
    """A task's journal: loaded once per step, each event written through
    to the store (and so durable) as it is recorded."""

    def __init__(self, store: TaskStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id
        self._events = store.journal(task_id)

    def get(self, key: str) -> Mapping[str, Any] | None:
        return self._events.get(key)

    def record(self, key: str, event: Mapping[str, Any]) -> None:
        self._store.record_event(self._task_id, key, event)
        self._events[key] = dict(event)


class TaskService:
    def __init__(
        self,
        store: TaskStore,
        executor: Executor,
        registry: RegistryClient,
        *,
        default_release: str = "latest",
        max_artifact_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.executor = executor
        self.registry = registry
        self.default_release = default_release
        self.max_artifact_bytes = max_artifact_bytes
        self.runner_id = str(uuid.uuid4())
        self.events = TaskLog(store)
        self._stopping = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def start(self) -> None:
        """Register this process as a runner of steps, fail the steps of
        runners that are gone, and keep both up to date in the background."""
        self.store.register_runner(self.runner_id, host=socket.gethostname(), pid=os.getpid(), now=_now())
        self.recover()
        self._heartbeat = threading.Thread(target=self._beat, name="agent-protocol-heartbeat", daemon=True)
        self._heartbeat.start()

    def close(self) -> None:
        self._stopping.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        with contextlib.suppress(RegistryError):
            self.store.unregister_runner(self.runner_id)

    def recover(self) -> int:
        """Fail the steps whose process is gone (``recover`` in the state
        table): a process of this host that no longer exists, or a runner
        not seen for ``STALE_SECONDS``. Their tasks can go on; steps that
        live processes run are left alone."""
        now = _now()
        host = socket.gethostname()
        dead = [
            runner_id
            for runner_id, runner_host, pid, seen_at in self.store.runners()
            if runner_id != self.runner_id
            and ((runner_host == host and not _process_exists(pid)) or (now - seen_at).total_seconds() > STALE_SECONDS)
        ]
        count = self.store.fail_orphaned_steps(
            "the service stopped while this step ran; nothing it recorded is lost, and a tool call it had"
            " started is not made again: post a new step to go on",
            dead=dead,
        )
        if count:
            log.warning("marked %d step(s) left running by a stopped process as failed", count)
        return count

    def _beat(self) -> None:
        beats = 0
        while not self._stopping.wait(HEARTBEAT_SECONDS):
            beats += 1
            try:
                self.store.beat(self.runner_id, _now())
                if beats % RECOVER_EVERY == 0:
                    self.recover()
            except RegistryError as exc:  # the database is away: try again at the next beat
                log.warning("runner heartbeat failed: %s", exc)

    # --- tasks ---------------------------------------------------------------------------

    def create_task(self, caller: Caller, body: Mapping[str, Any]) -> TaskRecord:
        text = optional_text(body, "input")
        extra = object_member(body, "additional_input")
        check_task_keys(extra)
        named = extra.get("agent")
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
        agent_name = f"{usecase}/{name}"
        release = extra.get("release", self.default_release)
        if not isinstance(release, str) or not release:
            raise unprocessable(
                "additional_input.release must be a version, a range or a channel", "/additional_input/release"
            )
        agent = self._fetch(agent_name, release, creating=True)
        checked = task_inputs(agent, text, extra.get("inputs"))
        self._check_bound(agent)
        now = _now()
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
            status=transition("task", "(new)", "create").target,
            created_at=now,
            updated_at=now,
        )
        self.store.create_task(task)
        self.events.created(task)
        return task

    def get_task(self, caller: Caller, task_id: str) -> TaskRecord:
        task = self.store.get_task(task_id, owner=caller.scope)
        if task is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return task

    def list_tasks(self, caller: Caller, page: Page) -> tuple[list[TaskRecord], int]:
        return self.store.list_tasks(owner=caller.scope, offset=page.offset, limit=page.size)

    def cancel_task(self, caller: Caller, task_id: str) -> TaskRecord:
        task = self.get_task(caller, task_id)
        target = transition("task", task.status, "cancel").target
        cancelled = replace(task, status=target, updated_at=_now())
        if not self.store.set_task_status(task_id, from_states=(task.status,), task=cancelled):
            raise _conflict(self.get_task(caller, task_id), "cancel")
        self.events.state(cancelled)
        return cancelled

    # --- steps ---------------------------------------------------------------------------

    def execute_step(self, caller: Caller, task_id: str, body: Mapping[str, Any]) -> StepRecord:
        task = self.get_task(caller, task_id)
        text = optional_text(body, "input")
        extra = object_member(body, "additional_input")
        check_step_input(extra)
        pending = self.store.pending_action(task_id)
        decision = checked_decision(extra, pending)
        transition("task", task.status, "step")
        if decision is not None and pending is not None:
            transition("action", pending.status, decision["decision"])
            agent = self._pinned(task)
            if decision["decision"] == "edit":
                problem = self.executor.check_decision(agent, pending_action(pending), decision["arguments"])
                if problem is not None:
                    raise InvalidInputs(
                        f"the edited arguments do not fit {pending.tool}: {problem}",
                        [Issue(message=problem, path="/additional_input/arguments")],
                    )
        step = StepRecord(
            step_id=str(uuid.uuid4()),
            task_id=task_id,
            number=task.steps + 1,
            status=transition("step", "(new)", "create").target,
            created_at=_now(),
            input=text,
            additional_input=dict(extra),
            runner_id=self.runner_id,
            worker=worker_id(),
        )
        claimed = self.store.claim_task(
            task_id, owner=caller.scope, step=step, from_states=("created", "waiting_for_input")
        )
        if claimed is None:
            raise _conflict(self.get_task(caller, task_id), "step")
        step = replace(step, number=claimed.steps)  # as the store numbered it, whatever raced
        self.events.step_started(claimed, step)
        try:
            if decision is not None and pending is not None:
                self._decide(pending, decision, step)
            result = self._advance(claimed, step)
        except RegistryError as exc:
            # The registry could not give the pinned agent: the step fails,
            # and the task can try again.
            log.warning("step %s of task %s failed: %s", step.step_id, task_id, exc)
            return self._finish_failed(claimed, step, str(exc))
        except BaseException:
            self._finish_failed(claimed, step, "an internal error of the service stopped the step; it has been logged")
            raise
        failed_call = failed_model_call(result)
        if failed_call is not None:
            # Nothing was journaled for the call: the next step makes it again,
            # and replays everything before it.
            log.warning("step %s of task %s failed: %s", step.step_id, task_id, failed_call)
            reason = f"{failed_call}; the task can go on: post a new step to try the call again"
            return self._finish_failed(claimed, step, reason, additional=step_output(claimed, result.run_trace))
        return self._finish(claimed, step, result)

    def _decide(self, pending: ActionRecord, decision: Mapping[str, Any], step: StepRecord) -> None:
        choice = str(decision["decision"])
        edited = decision.get("arguments") if choice == "edit" else None
        if not self.store.decide_action(
            pending.action_id,
            status=_DECIDED[choice],
            step_id=step.step_id,
            reason=decision.get("reason"),
            edited_arguments=edited,
        ):
            raise InvalidState(
                "the action was decided by another request", entity="action", state="decided", allowed=[]
            )
        self.store.record_event(
            pending.task_id,
            pending.key,
            {"decision": choice, "reason": decision.get("reason"), "arguments": edited},
        )
        self.events.action(replace(pending, status=_DECIDED[choice], decided_by_step_id=step.step_id))

    def _advance(self, task: TaskRecord, step: StepRecord) -> StepResult:
        agent = self._pinned(task)
        journal = _StoreJournal(self.store, task.task_id)
        with self.events.sink(task.task_id, step.step_id) as sink:
            return self.executor.step(agent, task.inputs, journal=journal, sink=sink)

    def _finish(self, task: TaskRecord, step: StepRecord, result: StepResult) -> StepRecord:
        trace = result.run_trace
        additional = step_output(task, trace)
        now = _now()
        if result.action is not None:
            additional["action"] = self._propose(task, step, result.action)
        finished_task: TaskRecord
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
                task,
                status=transition("task", "running", event).target,
                outcome=run.outcome,
                output=run.output,
                error=run.error,
                running_step_id=None,
                updated_at=now,
            )
            if run.output:
                self._agent_artifact(
                    task, step, ANSWER_FILE, run.output.encode("utf-8"), "text/markdown; charset=utf-8"
                )
        else:
            finished_task = replace(
                task, status=transition("task", "running", "pause").target, running_step_id=None, updated_at=now
            )
        for span in trace.spans("execute_tool"):
            if not span.attributes.get("registry.replayed"):
                self._tool_file(task, step, span.attributes.get("registry.tool.output"))
        finished = replace(
            step,
            status=transition("step", "running", "finish").target,
            output=result.output,
            additional_output=additional,
            is_last=result.is_last,
            finished_at=now,
        )
        return self._store_finished(task, finished, finished_task)

    def _propose(self, task: TaskRecord, step: StepRecord, proposed: PendingAction) -> dict[str, Any]:
        action = ActionRecord(
            action_id=str(uuid.uuid4()),
            task_id=task.task_id,
            step_id=step.step_id,
            key=proposed.key,
            agent=proposed.agent,
            tool=proposed.tool,
            arguments=proposed.arguments,
            thought=proposed.thought,
            status=transition("action", "(new)", "propose").target,
            created_at=_now(),
        )
        self.store.add_action(action)
        self.events.action(action)
        return action_json(action)

    def _finish_failed(
        self, task: TaskRecord, step: StepRecord, reason: str, *, additional: Mapping[str, Any] | None = None
    ) -> StepRecord:
        """The step fails and the run is not over: the task waits for the next
        step, which goes on from what the journal holds."""
        now = _now()
        failed = replace(
            step,
            status=transition("step", "running", "fail").target,
            additional_output={**(additional or {}), "state": "failed", "error": reason},
            finished_at=now,
        )
        waiting = transition("task", "running", "interrupt").target
        return self._store_finished(task, failed, replace(task, status=waiting, running_step_id=None, updated_at=now))

    def _store_finished(self, task: TaskRecord, finished: StepRecord, finished_task: TaskRecord) -> StepRecord:
        if not self.store.finish_step(finished, finished_task):
            # Another process took this step for dead and failed it meanwhile:
            # what is stored is the answer.
            stored = self.store.get_step(task.task_id, finished.step_id)
            return stored if stored is not None else finished
        self.events.step_finished(finished, finished_task)
        return finished

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
        if len(data) > self.max_artifact_bytes:
            raise PayloadTooLarge(f"an artifact may hold at most {self.max_artifact_bytes} bytes")
        name = checked_file_name(file_name)
        artifact = ArtifactRecord(
            artifact_id=str(uuid.uuid4()),
            task_id=task_id,
            agent_created=False,
            file_name=name,
            relative_path=checked_relative_path(relative_path),
            content_type=checked_content_type(content_type, name),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at=_now(),
        )
        transition("artifact", "(new)", "upload")
        self.store.add_artifact(artifact, data)
        self.events.artifact(artifact)
        return artifact

    def _tool_file(self, task: TaskRecord, step: StepRecord, output: Any) -> None:
        """A tool's output that is a file (``{"artifact": {"file_name", "content",
        "content_type"?}}``) becomes an artifact of the step."""
        if not isinstance(output, str) or not output.startswith('{"artifact"'):
            return
        try:
            artifact = json.loads(output)["artifact"]
            name = checked_file_name(str(artifact["file_name"]))
            content = str(artifact["content"]).encode("utf-8")
        except (ValueError, KeyError, TypeError, InvalidRequest):
            return  # not a file after all: the output stays an observation only
        if len(content) <= self.max_artifact_bytes:
            self._agent_artifact(task, step, name, content, checked_content_type(artifact.get("content_type"), name))

    def _agent_artifact(self, task: TaskRecord, step: StepRecord, name: str, data: bytes, content_type: str) -> None:
        transition("artifact", "(new)", "produce")
        artifact = ArtifactRecord(
            artifact_id=str(uuid.uuid4()),
            task_id=task.task_id,
            agent_created=True,
            file_name=name,
            relative_path=None,
            content_type=content_type,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at=_now(),
            step_id=step.step_id,
        )
        self.store.add_artifact(artifact, data)
        self.events.artifact(artifact)

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


def _conflict(task: TaskRecord, event: str) -> InvalidState:
    if task.status == "running":
        detail = "another step of this task is running: one step runs at a time"
    else:
        detail = f"the task is {task.status}: it cannot {event}"
    try:
        transition("task", task.status, event, detail=detail)
    except InvalidState as exc:
        return exc
    return InvalidState(detail, entity="task", state=task.status, allowed=[])


def _process_exists(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs: a zombie (dead, not yet
    reaped by its parent, as after a SIGKILL in a container without an init)
    does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # "pid (command) state ...": the command may hold spaces and parentheses.
            state = stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: kill(0) is all there is to know
    return state not in ("Z", "X")


def _now() -> datetime:
    return datetime.now(timezone.utc)
