"""What a task or a step request may say (registry/protocol/requests.py):
unknown members of additional_input are refused with a "did you mean", a
problem about missing inputs says how ``input`` maps to them, and a task
whose tools or retrievers nothing binds is refused before anything runs
(with real MCP and model servers: tests/integration/test_protocol_requests_processes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LibraryRepo
from tests.support.protocol_service import create, step
from tests.support.request_library import no_tasks, release_library, service_app, services_over


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    return release_library(repo)


@pytest.fixture
def services(library: LibraryRepo, tmp_path: Path) -> Iterator[Any]:
    with services_over(library, tmp_path) as make:
        yield make


# --- unknown members -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unknown", "extra", "says"),
    [
        ("relase", {"relase": "v1.0.0", "inputs": {"question": "q"}}, "did you mean 'release'?"),
        ("input", {"input": {"question": "q"}}, "did you mean 'inputs'?"),
        ("question", {"question": "q"}, "an agent's inputs go under additional_input.inputs"),
        ("a/b~c", {"a/b~c": 1}, "an agent's inputs go under additional_input.inputs"),
    ],
)
def test_an_unknown_member_of_a_tasks_additional_input_is_refused_naming_it(
    services: Any, unknown: str, extra: dict[str, Any], says: str
) -> None:
    http = services([])
    response = http.post("/ap/v1/agent/tasks", json={"additional_input": {"agent": "s/draft", **extra}})
    body = response.get_json()
    assert response.status_code == 400 and body["type"] == "/problems/invalid-request"
    assert f"additional_input has no member {unknown!r}" in body["detail"] and says in body["detail"]
    pointer = unknown.replace("~", "~0").replace("/", "~1")  # RFC 6901
    assert body["path"] == f"/additional_input/{pointer}" and body["message"] == body["detail"]
    assert no_tasks(http)


def test_an_unknown_member_of_a_steps_additional_input_is_refused_naming_it(services: Any) -> None:
    http = services([{"content": "drafted"}])
    task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
    refused = step(http, task, expect=400, decison="approve")
    assert refused["type"] == "/problems/invalid-request" and "did you mean 'decision'?" in refused["detail"]
    other = step(http, task, expect=400, note="hello")
    assert "it takes decision, reason, arguments" in other["detail"]
    assert http.get(f"/ap/v1/agent/tasks/{task}").get_json()["steps"] == 0
    assert step(http, task)["output"] == "drafted"


def test_missing_inputs_say_how_input_maps_to_an_agents_inputs(services: Any) -> None:
    http = services([])
    response = http.post("/ap/v1/agent/tasks", json={"input": "Why?", "additional_input": {"agent": "s/two"}})
    body = response.get_json()
    assert response.status_code == 422 and body["type"] == "/problems/invalid-inputs"
    assert (
        "input (the free text) fills an agent's inputs only when it requires exactly one text input" in body["detail"]
    )
    assert "s/two requires pipeline, question" in body["detail"]
    assert body["errors"][0]["path"].startswith("/additional_input/inputs")


# --- what nothing binds ----------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["a/react", "a/asks"])
def test_a_task_whose_tools_nothing_binds_is_refused_at_creation(services: Any, agent: str) -> None:
    http = services([], tools={"other": lambda: "x"})
    response = http.post("/ap/v1/agent/tasks", json={"additional_input": {"agent": agent, "inputs": {"question": "q"}}})
    body = response.get_json()
    assert response.status_code == 422 and body["type"] == "/problems/invalid-inputs"
    assert "no implementation is bound for tool 'lookup' (declared by a/react)" in body["detail"]
    assert "--tools MODULE:ATTR" in body["detail"] and "--mcp NAME=COMMAND" in body["detail"]
    assert body["errors"][0]["path"] == "/additional_input/agent"
    assert no_tasks(http)


def test_a_task_whose_retriever_nothing_binds_is_refused_at_creation(services: Any) -> None:
    http = services([])
    response = http.post(
        "/ap/v1/agent/tasks", json={"additional_input": {"agent": "d/docs", "inputs": {"question": "q"}}}
    )
    assert response.status_code == 422
    assert "no index is bound for retriever 'product-docs'" in response.get_json()["detail"]
    assert "--retriever NAME=FILE" in response.get_json()["detail"]


def test_a_task_whose_tools_are_bound_is_created(services: Any) -> None:
    http = services([])
    assert create(http, "a/asks", inputs={"question": "q"})["status"] == "created"


def test_a_task_does_not_call_a_map_for_another_agents_model_unused(library: LibraryRepo, tmp_path: Path) -> None:
    model_map = {"test-model": "served", "other-model": "served"}
    with service_app(library, tmp_path / "data", [{"content": "drafted"}], model_map=model_map) as app:
        http = app.test_client()
        task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
        last = step(http, task)
    assert last["is_last"] and last["output"] == "drafted"
    assert "warnings" not in last["additional_output"], last["additional_output"]
