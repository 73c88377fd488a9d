"""The Agent Protocol service, as the UI reads and drives it: over HTTP, with
the signed-in user's token, through the protocol's own endpoints (the UI
changes nothing the protocol would not let that token change).

Every request of a process goes through one pooled ``httpx.Client``
(``AgentService``): connections are kept alive and reused, and the TLS
context is made once, not once a call. It is made on first use in the
process that uses it (a gunicorn worker, not the master it forks from), and
closed with the application, or at exit.
"""

from __future__ import annotations

import os
import threading
import weakref
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


class AgentService:
    """The one pooled client of a process for the service at ``base``."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._pid = 0

    def http(self) -> httpx.Client:
        """The process's client, made on first use (a forked child makes its own)."""
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                # Users share the client, so it must keep nothing of one for
                # another: no cookie is ever stored (tokens go per request).
                no_cookies = CookieJar(DefaultCookiePolicy(allowed_domains=[]))
                self._client = httpx.Client(timeout=_TIMEOUT, limits=_LIMITS, cookies=no_cookies)
                self._pid = os.getpid()
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            if client is not None and self._pid == os.getpid():
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

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        base = self.service.base
        try:
            response = self.service.http().request(method, base + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise AgentServiceError(f"the Agent Protocol service at {base} cannot be reached: {exc}") from exc
        try:
            answer = response.json()
        except ValueError as exc:
            raise AgentServiceError(f"the Agent Protocol service answered {response.status_code} without JSON") from exc
        if response.status_code >= 400:
            detail = answer.get("detail") or answer.get("message") if isinstance(answer, dict) else None
            raise AgentServiceError(str(detail or f"status {response.status_code}"), status=response.status_code)
        return answer

    def list_tasks(self, page: int) -> dict[str, Any]:
        listing: dict[str, Any] = self._call("GET", f"/ap/v1/agent/tasks?current_page={page}&page_size=20")
        return listing

    def task_view(self, task_id: str) -> dict[str, Any]:
        """The task, its steps (all pages), its actions and its artifacts."""
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
        return {"task": task, "steps": steps, "actions": actions, "pending": pending}

    def step(self, task_id: str, additional_input: dict[str, Any]) -> dict[str, Any]:
        step: dict[str, Any] = self._call(
            "POST", f"/ap/v1/agent/tasks/{_id(task_id)}/steps", {"additional_input": additional_input}
        )
        return step


def client(app: Flask, token: str | None) -> TasksClient:
    """The service's endpoints for ``token``, over the process's pooled client."""
    service = app.extensions.get(AGENT_SERVICE_KEY)
    if not isinstance(service, AgentService):
        raise AgentServiceError("no Agent Protocol service is configured (REGISTRY_AGENTS_URL)", status=404)
    return TasksClient(service, token)


def _id(task_id: str) -> str:
    # Ids are the service's UUIDs; anything else would change the path.
    if not task_id.replace("-", "").isalnum() or len(task_id) > 64:
        raise AgentServiceError(f"no task {task_id!r}", status=404)
    return task_id
