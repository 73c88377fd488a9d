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
import mimetypes
import os
import posixpath
import re
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
    InvalidDefinition,
    InvalidInputs,
    InvalidRequest,
    InvalidState,
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
from registry.protocol.records import ActionRecord, ArtifactRecord, StepRecord, TaskRecord
from registry.protocol.states import TASK_FINISHED, transition
from registry.protocol.store import TaskStore
from registry.rendering.sandbox import RenderLimits

log = logging.getLogger("registry.protocol")

ANONYMOUS = "anonymous"
HEARTBEAT_SECONDS = 5.0
"""How often a runner says it is alive."""
STALE_SECONDS = 30.0
"""A runner not seen for this long is gone, and its running steps are failed."""
RECOVER_EVERY = 6
"""Heartbeats between two looks for the steps of runners that are gone."""
DECISIONS = ("approve", "reject", "edit")
_DECIDED = {"approve": "approved", "reject": "rejected", "edit": "edited"}
ANSWER_FILE = "answer.md"
_UNSAFE_PATH = re.compile(r"[\x00-\x1f\x7f\\]")


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
        text = _optional_text(body, "input")
        extra = _object(body, "additional_input")
        named = extra.get("agent")
        usecase, slash, name = named.partition("/") if isinstance(named, str) else ("", "", "")
        try:
            if not slash:
                raise InvalidRequest("it is not usecase/name")
            check_agent_name(usecase, name)
        except InvalidRequest as exc:
            raise _unprocessable(
                f"additional_input.agent must name the agent to run, as usecase/name: {exc.detail}",
                "/additional_input/agent",
            ) from exc
        agent_name = f"{usecase}/{name}"
        release = extra.get("release", self.default_release)
        if not isinstance(release, str) or not release:
            raise _unprocessable(
                "additional_input.release must be a version, a range or a channel", "/additional_input/release"
            )
        agent = self._fetch(agent_name, release, creating=True)
        inputs = extra.get("inputs")
        if inputs is None:
            inputs = _inputs_from_text(agent, text)
        if not isinstance(inputs, dict):
            raise _unprocessable("additional_input.inputs must be an object", "/additional_input/inputs")
        checked = _checked_inputs(agent, inputs)
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
        return cancelled

    # --- steps ---------------------------------------------------------------------------

    def execute_step(self, caller: Caller, task_id: str, body: Mapping[str, Any]) -> StepRecord:
        task = self.get_task(caller, task_id)
        text = _optional_text(body, "input")
        extra = _object(body, "additional_input")
        _check_step_input(extra)
        pending = self.store.pending_action(task_id)
        decision = _decision(extra, pending)
        transition("task", task.status, "step")
        if decision is not None and pending is not None:
            transition("action", pending.status, decision["decision"])
            agent = self._pinned(task)
            if decision["decision"] == "edit":
                problem = self.executor.check_decision(agent, _pending(pending), decision["arguments"])
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
        )
        claimed = self.store.claim_task(
            task_id, owner=caller.scope, step=step, from_states=("created", "waiting_for_input")
        )
        if claimed is None:
            raise _conflict(self.get_task(caller, task_id), "step")
        step = replace(step, number=claimed.steps)  # as the store numbered it, whatever raced
        try:
            if decision is not None and pending is not None:
                self._decide(pending, decision, step)
            result = self._advance(claimed)
        except RegistryError as exc:
            # The registry could not give the pinned agent: the step fails,
            # and the task can try again.
            log.warning("step %s of task %s failed: %s", step.step_id, task_id, exc)
            return self._finish_failed(claimed, step, str(exc))
        except BaseException:
            self._finish_failed(claimed, step, "an internal error of the service stopped the step; it has been logged")
            raise
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

    def _advance(self, task: TaskRecord) -> StepResult:
        agent = self._pinned(task)
        journal = _StoreJournal(self.store, task.task_id)
        return self.executor.step(agent, task.inputs, journal=journal)

    def _finish(self, task: TaskRecord, step: StepRecord, result: StepResult) -> StepRecord:
        trace = result.run_trace
        # The model calls this step made: not replayed, and answered (a call
        # the step ended on, parked for the next step, has no reply).
        live = [
            s
            for s in trace.spans("chat")
            if "registry.reply" in s.attributes and not s.attributes.get("registry.replayed")
        ]
        usage = {
            "input_tokens": sum(s.attributes.get("gen_ai.usage.input_tokens") or 0 for s in live),
            "output_tokens": sum(s.attributes.get("gen_ai.usage.output_tokens") or 0 for s in live),
        }
        additional: dict[str, Any] = {
            "agent": task.agent,
            "release": {"tag": task.release_tag, "commit": task.release_commit},
            "llm_calls": len(live),
            "usage": usage,
            "trace": trace.as_dict(),
        }
        now = _now()
        if result.action is not None:
            action = ActionRecord(
                action_id=str(uuid.uuid4()),
                task_id=task.task_id,
                step_id=step.step_id,
                key=result.action.key,
                agent=result.action.agent,
                tool=result.action.tool,
                arguments=result.action.arguments,
                thought=result.action.thought,
                status=transition("action", "(new)", "propose").target,
                created_at=now,
            )
            self.store.add_action(action)
            additional["action"] = _action_json(action)
        finished_task: TaskRecord
        if result.is_last and result.result is not None:
            run = result.result
            additional["outcome"] = run.outcome
            if run.error:
                additional["error"] = run.error
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
        if not self.store.finish_step(finished, finished_task):
            # Another process took this step for dead and failed it meanwhile:
            # what is stored is the answer.
            stored = self.store.get_step(task.task_id, step.step_id)
            return stored if stored is not None else finished
        return finished

    def _finish_failed(self, task: TaskRecord, step: StepRecord, reason: str) -> StepRecord:
        now = _now()
        failed = replace(
            step,
            status="failed",
            additional_output={"state": "failed", "error": reason},
            finished_at=now,
        )
        self.store.finish_step(failed, replace(task, status="waiting_for_input", running_step_id=None, updated_at=now))
        return failed

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
        name = _file_name(file_name)
        artifact = ArtifactRecord(
            artifact_id=str(uuid.uuid4()),
            task_id=task_id,
            agent_created=False,
            file_name=name,
            relative_path=_relative_path(relative_path),
            content_type=_content_type(content_type, name),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at=_now(),
        )
        transition("artifact", "(new)", "upload")
        self.store.add_artifact(artifact, data)
        return artifact

    def _tool_file(self, task: TaskRecord, step: StepRecord, output: Any) -> None:
        """A tool's output that is a file (``{"artifact": {"file_name", "content",
        "content_type"?}}``) becomes an artifact of the step."""
        if not isinstance(output, str) or not output.startswith('{"artifact"'):
            return
        try:
            artifact = json.loads(output)["artifact"]
            name = _file_name(str(artifact["file_name"]))
            content = str(artifact["content"]).encode("utf-8")
        except (ValueError, KeyError, TypeError, InvalidRequest):
            return  # not a file after all: the output stays an observation only
        if len(content) <= self.max_artifact_bytes:
            self._agent_artifact(task, step, name, content, _content_type(artifact.get("content_type"), name))

    def _agent_artifact(self, task: TaskRecord, step: StepRecord, name: str, data: bytes, content_type: str) -> None:
        transition("artifact", "(new)", "produce")
        self.store.add_artifact(
            ArtifactRecord(
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
            ),
            data,
        )

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
            raise _unprocessable(f"cannot run {name} at {release}: {exc}", "/additional_input") from exc

    def _pinned(self, task: TaskRecord) -> Agent:
        return self._fetch(task.agent, task.release_tag)


def _pending(action: ActionRecord) -> PendingAction:
    return PendingAction(action.key, action.agent, action.tool, action.arguments, action.thought)


def _action_json(action: ActionRecord) -> dict[str, Any]:
    return {
        "action_id": action.action_id,
        "status": action.status,
        "agent": action.agent,
        "tool": action.tool,
        "arguments": action.arguments,
        "thought": action.thought,
    }


def _decision(extra: Mapping[str, Any], pending: ActionRecord | None) -> dict[str, Any] | None:
    """The decision a step request carries, checked against what is pending."""
    if "decision" not in extra:
        if pending is not None:
            raise InvalidState(
                f"an action is pending ({pending.tool}): the next step must carry additional_input.decision"
                " (approve, reject or edit)",
                entity="action",
                state="pending",
                allowed=list(DECISIONS),
            )
        return None
    if pending is None:
        raise InvalidState(
            "no action is pending: a decision has nothing to decide", entity="action", state="none", allowed=[]
        )
    choice = extra["decision"]
    if choice not in DECISIONS:
        raise _unprocessable("additional_input.decision must be approve, reject or edit", "/additional_input/decision")
    reason = extra.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise _unprocessable("additional_input.reason must be text", "/additional_input/reason")
    arguments = extra.get("arguments")
    if choice == "edit" and not isinstance(arguments, dict):
        raise _unprocessable("an edit needs additional_input.arguments, an object", "/additional_input/arguments")
    return {"decision": choice, "reason": reason, "arguments": arguments}


def _check_step_input(extra: Mapping[str, Any]) -> None:
    """A step's additional_input is ours to read: its members have their types
    whether or not an action is pending, since the step echoes them."""
    if "decision" in extra and extra["decision"] not in DECISIONS:
        raise InvalidRequest("additional_input.decision must be approve, reject or edit")
    if extra.get("reason") is not None and not isinstance(extra["reason"], str):
        raise InvalidRequest("additional_input.reason must be text")
    if extra.get("arguments") is not None and not isinstance(extra["arguments"], dict):
        raise InvalidRequest("additional_input.arguments must be an object")


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


def _inputs_from_text(agent: Agent, text: str | None) -> dict[str, Any]:
    """``input`` fills the agent's one required string input when no inputs are given."""
    schema = agent.definition.get("inputs") or {}
    required = [n for n in schema.get("required") or [] if n != "passages"]
    properties = schema.get("properties") or {}
    if text is not None and len(required) == 1 and (properties.get(required[0]) or {}).get("type") == "string":
        return {required[0]: text}
    return {}


def _checked_inputs(agent: Agent, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` checked as the run will check them, before anything runs."""
    checked = dict(inputs)
    if agent.definition.get("type") == "rag" and "passages" not in checked:
        # The run retrieves them: an empty list stands in for the check.
        checked["passages"] = []
    try:
        agent.compiled.check_inputs(checked, limits=RenderLimits())
    except InvalidInputs as exc:
        raise InvalidInputs(
            f"the inputs do not fit {agent.usecase}/{agent.name}: {exc.detail}",
            [replace(issue, path="/additional_input/inputs" + issue.path) for issue in exc.errors],
        ) from exc
    except RegistryError as exc:
        raise _unprocessable(f"the inputs of {agent.usecase}/{agent.name}: {exc}", "/additional_input/inputs") from exc
    return dict(inputs)


def _unprocessable(message: str, path: str) -> InvalidInputs:
    return InvalidInputs(message, [Issue(message=message, path=path)])


def _optional_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{name} must be text or null")
    return value


def _object(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    if name not in body:
        return {}
    value = body[name]
    if not isinstance(value, dict):
        raise InvalidRequest(f"{name} must be an object")
    return value


def _file_name(name: str) -> str:
    base = posixpath.basename(name.replace("\\", "/")).strip()
    if not base or base in (".", "..") or _UNSAFE_PATH.search(base) or len(base) > 255:
        raise InvalidRequest("the file needs a name: 1 to 255 characters, no control characters")
    return base


def _relative_path(path: str | None) -> str | None:
    """A relative path inside the task's space, normalised; refused when it
    would leave it (``..``), is absolute, or holds control characters."""
    if path is None or path.strip() == "":
        return None
    if _UNSAFE_PATH.search(path) or len(path) > 1024:
        raise InvalidRequest("relative_path may not hold control characters or backslashes, nor be longer than 1024")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise InvalidRequest("relative_path must be relative, not absolute")
    if ".." in path.split("/"):
        raise InvalidRequest("relative_path may not hold '..': a file stays among the task's files")
    normalised = posixpath.normpath(path)
    return "" if normalised == "." else normalised


def _content_type(given: str | None, name: str) -> str:
    if given and "/" in given and len(given) <= 200 and not _UNSAFE_PATH.search(given):
        return given
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "application/octet-stream"


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
