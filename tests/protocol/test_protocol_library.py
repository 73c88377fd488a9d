"""A task for every agent of the bundled library runs to completion
through the Agent Protocol service, step by step, with the scripted model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask

from registry.client import RegistryClient
from registry.executor import Executor, ScriptedModel, SqliteFtsRetriever
from registry.protocol.app import create_app
from registry.serving.app import create_app as create_registry_app
from registry.settings import Settings
from tests.support.executor_fixtures import LIBRARY_AGENTS, example_inputs, library_tools, scripted_replies


@pytest.fixture
def protocol(example: Path, docs_index: SqliteFtsRetriever, tmp_path: Path) -> Iterator[Flask]:
    registry_app = create_registry_app(Settings(repo=str(example)))
    client = RegistryClient("http://registry.test", transport=httpx.WSGITransport(app=registry_app), timeout=30)
    executor = Executor(
        model=ScriptedModel.from_replies(scripted_replies(), source="the library test"),
        registry=client,
        tools=[library_tools()],
        retrievers={"product-docs": docs_index},
        model_name=None,
    )
    app = create_app(Settings(data_dir=str(tmp_path)), executor=executor, registry=client)
    yield app
    app.extensions["agent_protocol.close"]()
    executor.close()
    client.close()
    registry_app.extensions["prompt_registry.service"].close()


@pytest.mark.slow  # a task for every agent of the bundled library, one by one
@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_runs_to_completion_as_a_task(protocol: Flask, agent: str) -> None:
    http = protocol.test_client()
    created = http.post(
        "/ap/v1/agent/tasks", json={"additional_input": {"agent": agent, "inputs": example_inputs(agent)}}
    )
    assert created.status_code == 200, created.get_json()
    task = created.get_json()["task_id"]
    steps: list[dict[str, Any]] = []
    while not steps or not steps[-1]["is_last"]:
        assert len(steps) < 30, "the task does not end"
        response = http.post(f"/ap/v1/agent/tasks/{task}/steps")
        assert response.status_code == 200, response.get_json()
        steps.append(response.get_json())
    last = steps[-1]
    assert last["additional_output"]["outcome"] == "completed", last["additional_output"].get("error")
    assert last["output"]
    assert sum(s["additional_output"]["llm_calls"] for s in steps) >= len(steps)
    assert http.get(f"/ap/v1/agent/tasks/{task}").get_json()["status"] == "completed"
