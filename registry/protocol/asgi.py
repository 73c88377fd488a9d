"""``create_asgi_app``: the Agent Protocol service as one ASGI application.

    flask = create_app(settings, executor=executor, registry=client)
    app = create_asgi_app(flask, settings)

    # With routes of another package (A2A's) that stream tasks' events too:
    hub = event_hub(flask, settings)
    app = create_asgi_app(flask, settings, routes=a2a_routes(service, client, settings, hub=hub), hub=hub)

Starlette in front, on the worker's event loop:

- ``GET /ap/v1/agent/tasks/{task_id}/events``: a task's event log as
  server-sent events (``id:`` the entry's number, ``event:`` its kind,
  ``data:`` its JSON), resumed after ``Last-Event-ID`` (or ``?after=``),
  with a comment every ``agents_events_heartbeat`` seconds. Each
  subscriber is a coroutine fed by the process's ``EventHub``; none holds
  a thread. A task that is over, with nothing after the subscriber's
  position, answers 204 (an ``EventSource`` then stops reconnecting).
- ``routes``: what another package serves beside the protocol (A2A's
  Starlette routes), matched before the Flask application.
- everything else: the Flask application (``registry.protocol.app``),
  through a2wsgi in two thread pools: ``settings.threads`` threads for
  ``POST .../steps``, which runs a model round within its request, and a
  pool of their own for every other request, which answers at once, so
  that steps in flight never keep a task from being read.

Who calls and what they may see is decided as the Flask routes decide it
(``api.caller_for``, ``TaskService.get_task``); errors are the same RFC 9457
problems (``registry.web.problems``). ``app.state.event_hub`` and
``app.state.task_service`` are the hub and the service, for routes that
stream a task's events too (``hub.follow(task_id, after)`` on the event
loop; A2A's streams take the hub as ``a2a_routes``' argument instead). The
lifespan runs the hub's poller, and closes the service and its store at
shutdown: a hub given to other routes must be the one given here, or no
poller feeds them.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing, asynccontextmanager
from datetime import datetime, timezone
from typing import cast

import anyio
from a2wsgi import WSGIMiddleware
from flask import Flask
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from registry.errors import InvalidRequest, RegistryError
from registry.models import close_matches, did_you_mean
from registry.protocol.api import caller_for
from registry.protocol.hub import EventHub
from registry.protocol.records import TaskEvent
from registry.protocol.service import Caller, TaskService
from registry.protocol.states import TASK_FINISHED
from registry.settings import Settings
from registry.web.problems import PROBLEM_MEDIA_TYPE, Problem, internal_problem, registry_problem

EVENTS_PATH = "/ap/v1/agent/tasks/{task_id}/events"
READ_THREADS = 4
"""The threads that answer the Flask routes other than steps (they answer at once)."""
SHUTDOWN_GRACE_SECONDS = 5.0
"""How long streams have to end on their own once the server stops."""
_MAX_SEQ = 2**31 - 1
_RECENT_ENTRIES = 1024
"""Entries kept encoded, for the subscribers of a task that all get the same ones."""


def event_hub(app: Flask, settings: Settings) -> EventHub:
    """The hub that follows the task logs of ``app``'s store: made before the
    application when other routes stream tasks' events too (give it to
    ``create_asgi_app``, which runs it)."""
    service: TaskService = app.extensions["agent_protocol.service"]
    poll, buffer = settings.agents_events_poll, settings.agents_events_buffer
    return EventHub(service.store.events_in, poll_seconds=poll, buffer=buffer)


def create_asgi_app(
    app: Flask, settings: Settings, *, routes: Sequence[BaseRoute] = (), hub: EventHub | None = None
) -> Starlette:
    """The service of ``app`` (made by ``registry.protocol.app.create_app``)
    with its live task events, and ``routes`` before the Flask routes;
    ``hub`` (else one of its own, ``event_hub``) feeds its subscribers."""
    service: TaskService = app.extensions["agent_protocol.service"]
    hub = hub or event_hub(app, settings)
    stream = TaskEvents(service, hub, app.extensions["agent_protocol.tokens"], settings.agents_events_heartbeat)
    steps = _in_threads(app, settings.threads)
    reads = _in_threads(app, READ_THREADS)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
        await anyio.to_thread.run_sync(app.extensions["agent_protocol.close"])

    asgi = Starlette(
        routes=[
            Route(EVENTS_PATH, stream.answer, methods=["GET"]),
            *routes,
            Route("/ap/v1/agent/tasks/{task_id}/steps", steps, methods=["POST"]),
            Mount("", reads),
        ],
        lifespan=lifespan,
        exception_handlers={RegistryError: _registry_error, Exception: _unexpected_error},
    )
    asgi.state.event_hub = hub
    asgi.state.task_service = service
    return asgi


class TaskEvents:
    """``GET .../tasks/{task_id}/events``."""

    def __init__(
        self,
        service: TaskService,
        hub: EventHub,
        tokens: tuple[tuple[str, ...], tuple[str, ...]],
        heartbeat: float,
    ) -> None:
        self._service = service
        self._hub = hub
        self._tokens = tokens
        self._heartbeat = heartbeat
        self._recent: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        # Looking a task up takes a thread for a moment: a few, however many subscribers come at once.
        self._lookups = anyio.CapacityLimiter(READ_THREADS)

    async def answer(self, request: Request) -> Response:
        caller = caller_for(request.headers.get("Authorization", ""), self._tokens)
        after = resume_point(request.headers.get("Last-Event-ID"), request.query_params.multi_items())
        task_id = request.path_params["task_id"]
        finished, nothing_more = await anyio.to_thread.run_sync(
            self._look, caller, task_id, after, limiter=self._lookups
        )
        if nothing_more:
            return Response(status_code=204, headers={"Cache-Control": "no-store"})
        if request.method == "HEAD":
            return Response(media_type="text/event-stream", headers={"Cache-Control": "no-store"})
        return EventSourceResponse(
            self._events(task_id, after, finished=finished),
            ping=self._heartbeat,
            ping_message_factory=lambda: ServerSentEvent(comment="heartbeat", sep="\n"),
            sep="\n",
            # At shutdown the hub ends every subscription, and each stream
            # its response, before the server would cut them off.
            shutdown_event=self._hub.closing,
            shutdown_grace_period=SHUTDOWN_GRACE_SECONDS,
        )

    def _look(self, caller: Caller, task_id: str, after: int) -> tuple[bool, bool]:
        """Whether the task (the caller's, else ``TaskNotFound``) is over, and
        whether nothing will follow ``after``: it is over, long enough ago for
        its last entries to be written, and its log holds nothing after ``after``."""
        task = self._service.get_task(caller, task_id)
        if task.status not in TASK_FINISHED:
            return False, False
        settled = (datetime.now(timezone.utc) - task.updated_at).total_seconds() > self._hub.settle_seconds
        return True, settled and not self._service.store.events_after(task_id, after, limit=1)

    async def _events(self, task_id: str, after: int, *, finished: bool) -> AsyncIterator[bytes]:
        # Subscribed once the stream starts: a response that never starts (its
        # client gone first) leaves nothing behind in the hub.
        async with aclosing(self._hub.follow(task_id, after, finished=finished)) as entries:
            async for event in entries:
                yield self._encoded(event)

    def _encoded(self, event: TaskEvent) -> bytes:
        """The entry as one server-sent event, made once for all its subscribers."""
        key = (event.task_id, event.seq)
        encoded = self._recent.get(key)
        if encoded is None:
            # JSON escapes line ends: the data is one line, as SSE wants it.
            data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
            encoded = f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n".encode()
            self._recent[key] = encoded
            if len(self._recent) > _RECENT_ENTRIES:
                self._recent.popitem(last=False)
        return encoded


def _in_threads(app: Flask, workers: int) -> ASGIApp:
    """The Flask application, served by a pool of ``workers`` threads."""
    return cast(ASGIApp, WSGIMiddleware(app, workers=workers))  # type: ignore[arg-type]  # a2wsgi's WSGIApp protocol is narrower than Flask's __call__


def resume_point(last_event_id: str | None, query: Sequence[tuple[str, str]]) -> int:
    """The entry a subscriber resumes after: ``Last-Event-ID`` (what an
    ``EventSource`` sends when it reconnects), else ``?after=`` (its first
    connection), else 0 (from the start). The query takes nothing else."""
    given = [value for name, value in query if name == "after"]
    for name, _ in query:
        if name != "after":
            hint = did_you_mean(close_matches(name, ["after"]))
            raise InvalidRequest(f"unknown query parameter {name!r}{'; ' + hint if hint else ''}", parameter=name)
    if len(given) > 1:
        raise InvalidRequest("query parameter 'after' is given twice", parameter="after")
    if last_event_id is not None and last_event_id.strip():
        return _position(last_event_id.strip(), "the Last-Event-ID header")
    return _position(given[0], "after") if given else 0


def _position(raw: str, name: str) -> int:
    if not raw.isascii() or not raw.isdigit() or len(raw) > 10 or int(raw) > _MAX_SEQ:
        raise InvalidRequest(f"{name} must be an event id: a whole number from 0 to {_MAX_SEQ}")
    return int(raw)


async def _registry_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, RegistryError)
    return _problem(registry_problem(error, detail_member="message"))


async def _unexpected_error(_: Request, error: Exception) -> Response:
    # Starlette raises it again once answered, and the server logs it.
    answer = internal_problem()
    answer.body["message"] = answer.body["detail"]
    return _problem(answer)


def _problem(answer: Problem) -> Response:
    return Response(answer.content(), status_code=answer.status, headers=answer.headers, media_type=PROBLEM_MEDIA_TYPE)
