"""The Agent Protocol service, as the UI reads and drives it: over HTTP, with
the signed-in user's token, through the protocol's own endpoints (the UI
changes nothing the protocol would not let that token change).

Every request of a process goes through one pooled ``httpx.Client``
(``AgentService``): connections are kept alive and reused, and the TLS
context is made once, not once a call. It is made on first use in the
process that uses it (a gunicorn worker, not the master it forks from), and
closed with the application, or at exit.

A task page follows its task live through ``TasksClient.events``: the
service's event stream, relayed as it comes over a connection of its own
(a client for streams, apart from the pool the pages share, so that open
pages never take the pages' connections). Under the registry's gevent
workers a relayed stream holds a greenlet, not a thread.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx
from flask import Flask

from registry.errors import AgentServiceError
from registry.settings import Settings

AGENT_SERVICE_KEY = "prompt_registry.ui.agent_service"

_TIMEOUT = httpx.Timeout(10.0, read=300.0)
"""A step runs a model round within its request."""
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
_STREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=0)
"""A stream lasts as long as its page is open: one connection each, never
kept for another (the worker's own limit on connections bounds them)."""


class AgentService:
    """The one pooled client of a process for the service at ``base``, and its client for streams."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self._lock = threading.Lock()
        self._clients: dict[str, httpx.Client] = {}
        self._pid = 0

    def http(self) -> httpx.Client:
        """The process's client, made on first use (a forked child makes its own)."""
        return self._client("pages", _LIMITS)

    def streams(self) -> httpx.Client:
        """The process's client for event streams."""
        return self._client("streams", _STREAM_LIMITS)

    def _client(self, name: str, limits: httpx.Limits) -> httpx.Client:
        with self._lock:
            if self._pid != os.getpid():
                self._clients, self._pid = {}, os.getpid()
            if name not in self._clients:
                # Users share the client, so it must keep nothing of one for
                # another: no cookie is ever stored (tokens go per request).
                no_cookies = CookieJar(DefaultCookiePolicy(allowed_domains=[]))
                self._clients[name] = httpx.Client(timeout=_TIMEOUT, limits=limits, cookies=no_cookies)
            return self._clients[name]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, {}
            if self._pid == os.getpid():
                for client in clients.values():
                    client.close()


def install(app: Flask, settings: Settings) -> None:
    """Give ``app`` its ``AgentService`` when one is configured, closed with the app."""
    if settings.agents_url:
        service = app.extensions[AGENT_SERVICE_KEY] = AgentService(settings.agents_url)
        weakref.finalize(app, service.close)


@dataclass
class TasksClient:
    """The service's endpoints, called with one user's token."""

    service: AgentService
    token: str | None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        base = self.service.base
        try:
            response = self.service.http().request(method, base + path, json=body, headers=self._headers())
        except httpx.HTTPError as exc:
            raise AgentServiceError(f"the Agent Protocol service at {base} cannot be reached: {exc}") from exc
        return _answer(response)

    def list_tasks(self, page: int) -> dict[str, Any]:
        listing: dict[str, Any] = self._call("GET", f"/ap/v1/agent/tasks?current_page={page}&page_size=20")
        return listing

    def task_view(self, task_id: str) -> dict[str, Any]:
        """The task, its steps (all pages), its actions, the one pending and
        the decided ones by id (a background task's steps carry no decision:
        its worker, not the user, posts them)."""
        task = self._call("GET", f"/ap/v1/agent/tasks/{_id(task_id)}")
        steps: list[dict[str, Any]] = []
        page = 1
        while True:
            listing = self._call("GET", f"/ap/v1/agent/tasks/{_id(task_id)}/steps?current_page={page}&page_size=100")
            steps.extend(listing["steps"])
            if page >= listing["pagination"]["total_pages"]:
                break
            page += 1
        actions = self._call("GET", f"/ap/v1/agent/tasks/{_id(task_id)}/actions")["actions"]
        pending = next((a for a in actions if a["status"] == "pending"), None)
        decisions = {a["action_id"]: a for a in actions if a["status"] != "pending"}
        return {"task": task, "steps": steps, "actions": actions, "pending": pending, "decisions": decisions}

    def step(self, task_id: str, additional_input: dict[str, Any]) -> dict[str, Any]:
        step: dict[str, Any] = self._call(
            "POST", f"/ap/v1/agent/tasks/{_id(task_id)}/steps", {"additional_input": additional_input}
        )
        return step

    def events(self, task_id: str, *, last_event_id: str | None, after: str | None) -> Iterator[bytes] | None:
        """The task's event stream (server-sent events) as it comes, resumed
        after ``last_event_id`` (else ``after``); None when the service says
        nothing will follow (204). The service's refusals raise
        ``AgentServiceError`` before the stream starts; closing the iterator
        closes the stream."""
        headers = self._headers()
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        streams, base = self.service.streams(), self.service.base
        url = f"{base}/ap/v1/agent/tasks/{_id(task_id)}/events"
        request = streams.build_request("GET", url, params={"after": after} if after else None, headers=headers)
        try:
            response = streams.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise AgentServiceError(f"the Agent Protocol service at {base} cannot be reached: {exc}") from exc
        if response.status_code == 200:
            return _relayed(response)
        try:
            response.read()
        finally:
            response.close()
        if response.status_code == 204:
            return None
        _answer(response)  # raises the service's refusal
        raise AgentServiceError(f"the Agent Protocol service answered {response.status_code} instead of a stream")


def client(app: Flask, token: str | None) -> TasksClient:
    """The service's endpoints for ``token``, over the process's pooled client."""
    service = app.extensions.get(AGENT_SERVICE_KEY)
    if not isinstance(service, AgentService):
        raise AgentServiceError("no Agent Protocol service is configured (REGISTRY_AGENTS_URL)", status=404)
    return TasksClient(service, token)


def _answer(response: httpx.Response) -> Any:
    """The JSON of a successful answer; ``AgentServiceError`` with the service's detail for a refusal."""
    try:
        answer = response.json()
    except ValueError as exc:
        raise AgentServiceError(f"the Agent Protocol service answered {response.status_code} without JSON") from exc
    if response.status_code >= 400:
        detail = answer.get("detail") or answer.get("message") if isinstance(answer, dict) else None
        raise AgentServiceError(str(detail or f"status {response.status_code}"), status=response.status_code)
    return answer


def _relayed(response: httpx.Response) -> Iterator[bytes]:
    try:
        yield from response.iter_raw()
    except httpx.HTTPError:
        return  # the service went away: the page's EventSource connects again
    finally:
        response.close()


def _id(task_id: str) -> str:
    # Ids are the service's UUIDs; anything else would change the path.
    if not task_id.replace("-", "").isalnum() or len(task_id) > 64:
        raise AgentServiceError(f"no task {task_id!r}", status=404)
    return task_id
