"""The Agent Protocol service over a library for the tests: the executor with
a scripted model (or a model of the test's own), a registry client served in
process, and the HTTP calls that create a task and run a step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from flask import Flask
from flask.testing import FlaskClient

from registry.client import RegistryClient
from registry.executor import ChatModel, Executor, PythonTools, ScriptedModel
from registry.protocol.app import create_app
from registry.serving.app import create_app as create_registry_app
from registry.settings import Settings
from tests.conftest import LibraryRepo


class Service:
    """The service over a library, with a script of replies and tools."""

    def __init__(
        self,
        repo: LibraryRepo,
        data: Path,
        replies: list[dict[str, Any]],
        *,
        tools: dict[str, Any] | None = None,
        model: ChatModel | None = None,
        **settings: Any,
    ) -> None:
        """``model``: the model the executor calls; else one scripted with ``replies``."""
        registry_app = create_registry_app(Settings(repo=str(repo.path)))
        self.registry_app = registry_app
        self.client = RegistryClient(
            "http://registry.test", transport=httpx.WSGITransport(app=registry_app), timeout=30
        )
        self.calls: list[dict[str, Any]] = []
        lookup = {"lookup": lambda word: self.calls.append({"word": word}) or f"{word} means something"}  # type: ignore[func-returns-value]
        self.executor = Executor(
            model=model or ScriptedModel.from_replies(replies, source="the test"),
            registry=self.client,
            tools=[PythonTools(tools or lookup)],
            require_approval=settings.pop("require_approval", ()),
            run_timeout=settings.pop("run_timeout", None),
            model_name=settings.pop("model_name", None),
        )
        self.settings = Settings(data_dir=str(data), **settings)
        self.app: Flask = create_app(self.settings, executor=self.executor, registry=self.client)

    def http(self, token: str | None = None) -> FlaskClient:
        client = self.app.test_client()
        if token:
            client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        return client

    def close(self) -> None:
        self.app.extensions["agent_protocol.close"]()
        self.executor.close()
        self.client.close()
        self.registry_app.extensions["prompt_registry.service"].close()


def create(http: FlaskClient, agent: str, **extra: Any) -> dict[str, Any]:
    response = http.post("/ap/v1/agent/tasks", json={"additional_input": {"agent": agent, **extra}})
    assert response.status_code == 200, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body


def step(http: FlaskClient, task_id: str, expect: int = 200, **additional: Any) -> dict[str, Any]:
    response = http.post(f"/ap/v1/agent/tasks/{task_id}/steps", json={"additional_input": additional})
    assert response.status_code == expect, response.get_json()
    body: dict[str, Any] = response.get_json()
    return body
