"""The Agent Protocol service, as the UI reads and drives it: over HTTP, with
the signed-in user's token, through the protocol's own endpoints (the UI
changes nothing the protocol would not let that token change)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from registry.errors import AgentServiceError
from registry.settings import Settings

_TIMEOUT = httpx.Timeout(10.0, read=300.0)
"""A step runs a model round within its request."""


@dataclass
class TasksClient:
    base: str
    token: str | None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = httpx.request(method, self.base + path, json=body, headers=headers, timeout=_TIMEOUT)
        except httpx.HTTPError as exc:
            raise AgentServiceError(f"the Agent Protocol service at {self.base} cannot be reached: {exc}") from exc
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


def client(settings: Settings, token: str | None) -> TasksClient:
    if not settings.agents_url:
        raise AgentServiceError("no Agent Protocol service is configured (REGISTRY_AGENTS_URL)", status=404)
    return TasksClient(settings.agents_url.rstrip("/"), token)


def _id(task_id: str) -> str:
    # Ids are the service's UUIDs; anything else would change the path.
    if not task_id.replace("-", "").isalnum() or len(task_id) > 64:
        raise AgentServiceError(f"no task {task_id!r}", status=404)
    return task_id
