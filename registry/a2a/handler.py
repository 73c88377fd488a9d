"""The SDK's ``RequestHandler``, answered by the Agent Protocol's ``TaskService``.

Why not the SDK's ``DefaultRequestHandler``: it runs an ``AgentExecutor``
inside the HTTP process (its ``ActiveTaskRegistry``, an in-memory queue
per task) and saves a protobuf ``Task`` to its ``TaskStore`` on every
event. Our runs happen on background workers (``TaskService`` with mode
``background``), and a task's state is the service's rows: under the
default handler, the executor would only relay our event log, each
process would hold an in-memory task for every stream, and the SDK's
saves would be a second writer of what the service owns, or a copy. So
this handler implements the SDK's ``RequestHandler`` interface directly:
each operation is one call of the service, read back as the SDK's types
(``mapping``); the SDK keeps everything of the protocol (the JSON-RPC and
HTTP+JSON dispatchers, 0.3 compatibility, request validation, errors,
server-sent events). Streams follow the task's event log through the
process's event hub (``stream``), so any process can serve any task's
stream, and a task's log is read once per poll however many follow it.

A message without a task id starts a task (``messages.task_request``),
which a worker runs at once, to its end or its next approval, with nothing
more from the client; its files are stored with it, before it can start.
A message naming a task that waits carries a decision
(``messages.decision``), and the run goes on on a worker. A decision names
no action: one sent while no action is pending (the task still submitted or
working, or the action decided meanwhile) is refused, saying so, rather
than held for an action its sender has not seen.
``message/send`` waits for the task to finish or to need its client, up to
``wait_seconds`` (``returnImmediately`` answers at once); a streamed send
and a resubscription end there too. Push notification configurations are
kept by ``PushConfigs`` (``registry.a2a.pushrequests``); a configuration
sent with a message is checked before anything changes, kept once the task
is created (or the decision taken), and then sent the task as it is
(``registry.a2a.pushnotifier``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import datetime
from typing import Protocol

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler, validate_request_params
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import validate_page_size

from registry.a2a import mapping, messages
from registry.a2a.access import agent_of, base_url_of, caller_of
from registry.a2a.faults import call
from registry.a2a.stream import TaskEvents, Translation, pauses
from registry.protocol.records import ArtifactRecord, TaskRecord
from registry.protocol.service import Caller, Page, TaskService
from registry.protocol.states import TASK_FINISHED

WAIT_SECONDS = 30.0
ARTIFACTS_SHOWN = 1000
CANCEL_TRIES = 5
"""Cancels tried while a worker moves the task on between the service's read and its write."""


class PushConfigs(Protocol):
    """Where push notification configurations are kept (``registry.a2a.pushconfigs``).

    Each call is made for a caller that may see the task (the handler asks
    the service first), in a worker thread; errors are the registry's
    (``NotFound`` for an unknown configuration, ``InvalidRequest`` for a
    refused URL)."""

    def check(self, config: TaskPushNotificationConfig) -> None:
        """Refuse (``InvalidRequest``) what ``set`` would refuse of the
        configuration itself (its URL, id, token or key): called before a
        message's task is created, so that a refused configuration leaves
        no task running behind it."""
        ...

    def set(self, caller: Caller, task_id: str, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        """Keep ``config`` for the task (its id when it has none); the
        configuration as kept. From then on, the task's changes are sent to
        it, beginning with the task as it is once it is kept."""
        ...

    def get(self, caller: Caller, task_id: str, config_id: str) -> TaskPushNotificationConfig: ...

    def list(self, caller: Caller, task_id: str) -> list[TaskPushNotificationConfig]: ...

    def delete(self, caller: Caller, task_id: str, config_id: str) -> None: ...


class TaskRequestHandler(RequestHandler):
    """A2A's operations over ``service``'s tasks."""

    def __init__(
        self,
        service: TaskService,
        *,
        events: TaskEvents,
        limits: messages.Limits,
        push_configs: PushConfigs | None = None,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self._service = service
        self._events = events
        self._limits = limits
        self._push_configs = push_configs
        self._wait_seconds = wait_seconds

    # --- messages ----------------------------------------------------------------------------

    @validate_request_params
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        caller = caller_of(context)
        task_id, after = await self._accept(params, context)
        task = await self._task(caller, context, task_id)
        if params.configuration.return_immediately or pauses(task):
            return task
        try:
            await asyncio.wait_for(self._settled(caller, context, task_id, after), self._wait_seconds)
        except asyncio.TimeoutError:
            pass  # the task as it is now: the client polls or subscribes for the rest
        return await self._task(caller, context, task_id)

    async def _settled(self, caller: Caller, context: ServerCallContext, task_id: str, after: int) -> None:
        """Once the task is over or waits for its client."""
        async for _event in self._follow(caller, context, task_id, after):
            pass

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        caller = caller_of(context)
        task_id, after = await self._accept(params, context)
        task = await self._task(caller, context, task_id)
        yield task
        if not pauses(task):
            async with aclosing(self._follow(caller, context, task_id, after)) as followed:
                async for event in followed:
                    yield event

    async def _accept(self, params: SendMessageRequest, context: ServerCallContext) -> tuple[str, int]:
        """Start the task the message asks for, or decide the action of the
        task it names; the task's id, and the last entry of its log before."""
        _refuse_tenant(params.tenant)
        if params.metadata.fields:
            raise messages.invalid(
                "the request's metadata is not read: name the agent and release in the message's metadata",
                "metadata",
            )
        caller = caller_of(context)
        message = params.message
        pushed = params.configuration.HasField("task_push_notification_config")
        if pushed:
            # Refused before anything changes: a refused configuration leaves no task behind.
            await call(self._push_configured().check, params.configuration.task_push_notification_config)
        if message.task_id:
            if message.context_id and message.context_id != message.task_id:
                raise messages.invalid(
                    f"task {message.task_id} is its own context: its contextId is its id", "message.context_id"
                )
            decision = messages.decision(message, limits=self._limits)
            after = await self._events.position(message.task_id)
            await self._decide(caller, message.task_id, decision)
            task_id = message.task_id
        else:
            request = messages.task_request(message, endpoint_agent=agent_of(context), limits=self._limits)
            task_id = (await call(self._service.create_task, caller, request.body(), files=request.uploads)).task_id
            after = 0
        if pushed:
            # Kept once the task is (or once the decision is taken), and a worker
            # may have moved the task on meanwhile: ``set`` sends the task as it
            # is then, and every change after, so the receiver misses none.
            config = TaskPushNotificationConfig()
            config.CopyFrom(params.configuration.task_push_notification_config)
            config.task_id = task_id
            await call(self._push_configured().set, caller, task_id, config)
        return task_id, after

    async def _decide(self, caller: Caller, task_id: str, decision: messages.Decision) -> None:
        """``decision`` on the task's pending action; with none pending, an
        ``UnsupportedOperationError`` saying what the task is doing instead."""
        try:
            await call(self._service.decide, caller, task_id, decision.as_mapping())
        except UnsupportedOperationError as exc:
            record = await call(self._service.get_task, caller, task_id)
            raise UnsupportedOperationError(_nothing_to_decide(record)) from exc

    # --- tasks -------------------------------------------------------------------------------

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        _refuse_tenant(params.tenant)
        return await self._task(caller_of(context), context, params.id)

    @validate_request_params
    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        _refuse_tenant(params.tenant)
        if params.status != TaskState.TASK_STATE_UNSPECIFIED or params.HasField("status_timestamp_after"):
            raise messages.invalid("tasks are listed by page only: leave status and statusTimestampAfter out", "status")
        caller = caller_of(context)
        size = params.page_size if params.HasField("page_size") else DEFAULT_LIST_TASKS_PAGE_SIZE
        validate_page_size(size)
        if params.context_id:
            # A task is its own context.
            try:
                found = [await call(self._service.get_task, caller, params.context_id)]
            except TaskNotFoundError:
                found = []
            records, total, number = found, len(found), 1
        else:
            number = _page_number(params.page_token)
            records, total = await call(self._service.list_tasks, caller, Page(number, size))
        tasks = [await self._shown(caller, context, record, artifacts=params.include_artifacts) for record in records]
        more = number * size < total and not params.context_id
        return ListTasksResponse(
            tasks=tasks, next_page_token=str(number + 1) if more else "", page_size=size, total_size=total
        )

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        _refuse_tenant(params.tenant)
        caller = caller_of(context)
        for tries_left in reversed(range(CANCEL_TRIES)):
            try:
                await call(self._service.cancel_task, caller, params.id, cancelling=True)
                break
            except TaskNotCancelableError:
                # The service writes ``cancelled`` only if the task is still in
                # the state it read: a worker that moved it on meanwhile (queued
                # to running, running to input-required) makes it refuse a
                # cancel the new state allows. A task that is over is refused.
                record = await call(self._service.get_task, caller, params.id)
                if not tries_left or record.status in TASK_FINISHED:
                    raise
        return await self._task(caller, context, params.id)

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        _refuse_tenant(params.tenant)
        caller = caller_of(context)
        after = await self._events.position(params.id)
        task = await self._task(caller, context, params.id)
        if task.status.state in mapping.TERMINAL:
            raise UnsupportedOperationError(
                f"task {params.id} is {TaskState.Name(task.status.state)}: nothing more will happen to it"
            )
        yield task
        # Closed with the stream (its client gone), so the hub stops feeding it at once.
        async with aclosing(self._follow(caller, context, params.id, after)) as followed:
            async for event in followed:
                yield event

    async def _follow(
        self, caller: Caller, context: ServerCallContext, task_id: str, after: int
    ) -> AsyncGenerator[Event, None]:
        """The task's events after entry ``after``, until one ends the stream
        (or the log ends, or the hub drops this follower for not reading)."""
        translation = Translation(
            task_id,
            status_of=lambda status, since: self._entry_status(caller, task_id, status, since),
            artifact_of=lambda artifact_id: self._artifact(caller, context, task_id, artifact_id),
        )
        async with aclosing(self._events.follow(task_id, after)) as entries:
            async for entry in entries:
                for event in await translation.events(entry):
                    yield event
                    if pauses(event):
                        return

    # --- reading tasks back ------------------------------------------------------------------

    async def _task(self, caller: Caller, context: ServerCallContext, task_id: str) -> Task:
        record = await call(self._service.get_task, caller, task_id)
        return await self._shown(caller, context, record, artifacts=True)

    async def _shown(self, caller: Caller, context: ServerCallContext, record: TaskRecord, *, artifacts: bool) -> Task:
        status = await self._status(caller, record.task_id, record.status, record=record)
        shown: list[Artifact] = []
        if artifacts:
            stored, _ = await call(self._service.list_artifacts, caller, record.task_id, Page(1, ARTIFACTS_SHOWN))
            shown = [await self._file(caller, context, artifact) for artifact in stored]
        return mapping.task(record, status, shown)

    async def _entry_status(self, caller: Caller, task_id: str, status: str, since: datetime) -> TaskStatus | None:
        """The status a ``state`` entry of the log tells; None for a wait the
        task has left already: a worker appends ``waiting_for_input`` just
        after it commits it, so a decision can come in between, and a stream
        must not end on a wait that is over."""
        record = await call(self._service.get_task, caller, task_id)
        if status == "waiting_for_input" and record.status != status:
            return None
        return await self._status(caller, task_id, status, record=record, since=since)

    async def _status(
        self,
        caller: Caller,
        task_id: str,
        status: str,
        *,
        record: TaskRecord | None = None,
        since: datetime | None = None,
    ) -> TaskStatus:
        """The A2A status of the task in ``status``, with its pending action or error."""
        if record is None:
            record = await call(self._service.get_task, caller, task_id)
        pending = None
        if status == "waiting_for_input":
            actions = await call(self._service.actions, caller, task_id)
            pending = next((action for action in actions if action.status == "pending"), None)
        updated_at = record.updated_at if since is None else since
        return mapping.task_status(status, updated_at=updated_at, pending=pending, error=record.error)

    async def _artifact(
        self, caller: Caller, context: ServerCallContext, task_id: str, artifact_id: str
    ) -> tuple[ArtifactRecord, Artifact] | None:
        try:
            record, _ = await call(self._service.artifact, caller, task_id, artifact_id)
        except TaskNotFoundError:  # gone, or not to be seen: nothing to stream
            return None
        return record, await self._file(caller, context, record)

    async def _file(self, caller: Caller, context: ServerCallContext, record: ArtifactRecord) -> Artifact:
        data = None
        if mapping.inline(record):
            _, data = await call(self._service.artifact, caller, record.task_id, record.artifact_id)
        return mapping.artifact(record, data, url=base_url_of(context) + mapping.artifact_path(record))

    # --- push notifications ------------------------------------------------------------------

    @validate_request_params
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        configs = self._push_configured()
        caller = await self._owner(params.task_id, context)
        return await call(configs.set, caller, params.task_id, params)

    @validate_request_params
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        configs = self._push_configured()
        caller = await self._owner(params.task_id, context)
        return await call(configs.get, caller, params.task_id, params.id)

    @validate_request_params
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        configs = self._push_configured()
        caller = await self._owner(params.task_id, context)
        return ListTaskPushNotificationConfigsResponse(configs=await call(configs.list, caller, params.task_id))

    @validate_request_params
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        configs = self._push_configured()
        caller = await self._owner(params.task_id, context)
        await call(configs.delete, caller, params.task_id, params.id)

    def _push_configured(self) -> PushConfigs:
        if self._push_configs is None:
            raise PushNotificationNotSupportedError("this service sends no push notifications")
        return self._push_configs

    async def _owner(self, task_id: str, context: ServerCallContext) -> Caller:
        """The caller, once it is known to see the task (``TaskNotFoundError`` otherwise)."""
        caller = caller_of(context)
        await call(self._service.get_task, caller, task_id)
        return caller

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError("the cards are public: GET .well-known/agent-card.json")


def _refuse_tenant(tenant: str) -> None:
    if tenant:
        raise InvalidParamsError(message=f"this service has no tenants: leave tenant out, not {tenant[:80]!r}")


def _nothing_to_decide(task: TaskRecord) -> str:
    """Why a decision on ``task`` is refused: it has no action pending."""
    state = TaskState.Name(mapping.a2a_state(task.status))
    if task.status in TASK_FINISHED:
        return f"task {task.task_id} is {state}: it is over, and takes no more messages"
    if task.status == "waiting_for_input" and task.mode != "background":
        return (
            f"task {task.task_id} waits for its next step through the Agent Protocol (POST .../steps):"
            " no action is pending, there is nothing to decide"
        )
    if task.status == "waiting_for_input":
        return (
            f"task {task.task_id}: the action was decided by another request meanwhile, and the task now waits"
            " for a decision on its next one (GetTask shows it): decide that one"
        )
    return (
        f"task {task.task_id} is {state}: no action is pending, there is nothing to decide yet. A decision"
        " answers the action of a task that is TASK_STATE_INPUT_REQUIRED: follow the task (SubscribeToTask,"
        " or GetTask) until it is"
    )


def _page_number(token: str) -> int:
    if not token:
        return 1
    if not token.isdigit() or not 1 <= int(token) < 2**31:
        raise messages.invalid("pageToken is the nextPageToken of an earlier answer", "page_token")
    return int(token)
