"""Task requests whose executor needs real processes: an MCP tool server that
cannot start the first time (the service's fault, tried again), and a real
OpenAI-compatible model server, which needs a model name in every request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.executor import OpenAIChatModel
from registry.executor.mcp_tools import McpTools
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import leaf
from tests.support.mcp_commands import down_the_first_time
from tests.support.openai_server import ScriptedModelServer
from tests.support.protocol_service import step
from tests.support.request_library import no_tasks, release_library, service_app, services_over


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    return release_library(repo)


@pytest.fixture
def services(library: LibraryRepo, tmp_path: Path) -> Iterator[Any]:
    with services_over(library, tmp_path) as make:
        yield make


def test_tools_that_cannot_start_are_the_services_fault_and_are_tried_again(
    library: LibraryRepo, tmp_path: Path
) -> None:
    server = McpTools("lookup", down_the_first_time(tmp_path / "tried"))
    with service_app(library, tmp_path / "data", [], tools=[server]) as app:
        http = app.test_client()
        body = {"additional_input": {"agent": "s/draft", "inputs": {"question": "q"}}}
        down = http.post("/ap/v1/agent/tasks", json=body)
        problem = down.get_json()
        assert down.status_code == 503 and problem["type"] == "/problems/not-ready", problem
        said = "the tools of this service cannot start now: --mcp lookup: the server exited with status 3"
        assert said in problem["detail"]
        assert no_tasks(http)
        assert http.post("/ap/v1/agent/tasks", json=body).status_code == 200


UNNAMED = leaf("unnamed", "Say: {{ question }}", question="string").replace(
    "model: {name: test-model, params: {temperature: 0.2, max_tokens: 50}}\n", ""
)


@pytest.mark.parametrize("model_name", [None, "served-model"])
def test_an_agent_that_names_no_model_needs_a_service_that_names_one(
    library: LibraryRepo, services: Any, tmp_path: Path, model_name: str | None
) -> None:
    assert "model:" not in UNNAMED
    library.release("v1.1.0", {"s/unnamed.yml": UNNAMED})
    # A real model needs a name in every request; the scripted model does not.
    with ScriptedModelServer([{"content": "said", "repeat": True}], tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="k", max_retries=0)
        http = services([], model=model, model_name=model_name)
        response = http.post(
            "/ap/v1/agent/tasks", json={"additional_input": {"agent": "s/unnamed", "inputs": {"question": "q"}}}
        )
        if model_name is None:
            body = response.get_json()
            assert response.status_code == 422 and body["type"] == "/problems/invalid-inputs"
            assert "s/unnamed names no model (model.name)" in body["detail"] and "--model-name" in body["detail"]
            assert no_tasks(http)
        else:
            assert response.status_code == 200, response.get_json()
            assert step(http, response.get_json()["task_id"])["output"] == "said"
