"""What a task or a step request may say (registry/protocol/requests.py):
unknown members of additional_input are refused with a "did you mean", a
problem about missing inputs says how ``input`` maps to them, and a task
whose tools or retrievers nothing binds is refused before anything runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.client import RegistryClient
from registry.executor import Executor, OpenAIChatModel, ScriptedModel
from registry.executor.mcp_tools import McpTools
from registry.protocol.app import create_app
from registry.serving.app import create_app as create_registry_app
from registry.settings import Settings
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import REACT, leaf
from tests.support.mcp_commands import down_the_first_time
from tests.support.openai_server import ScriptedModelServer
from tests.support.protocol_service import Service, create, step

ASKS = """\
name: Asks
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: ask, agent: a/react, inputs: {question: "{{ inputs.question }}"}}
"""
RAG = """\
name: Docs
type: rag
model: {name: test-model}
rag: {retriever: product-docs}
prompt_templates:
  user: "{{ question }} {% for p in passages %}{{ p.text }}{% endfor %}"
inputs: {type: object, required: [question, passages], properties: {question: {type: string}, passages: {type: array}}}
"""


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    return repo.release(
        "v1.0.0",
        {
            "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"),
            "s/two.yml": leaf("two", "{{ pipeline }}: {{ question }}", pipeline="string", question="string"),
            "a/react.yml": REACT,
            "a/asks.yml": ASKS,
            "d/docs.yml": RAG,
        },
    )


@pytest.fixture
def services(library: LibraryRepo, tmp_path: Path) -> Iterator[Any]:
    made: list[Service] = []

    def make(replies: list[dict[str, Any]], **options: Any) -> FlaskClient:
        service = Service(library, tmp_path / f"data{len(made)}", replies, **options)
        made.append(service)
        return service.http()

    yield make
    for service in made:
        service.close()


def no_tasks(http: FlaskClient) -> bool:
    return bool(http.get("/ap/v1/agent/tasks").get_json()["pagination"]["total_items"] == 0)


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


@contextmanager
def service_app(library: LibraryRepo, data: Path, replies: list[dict[str, Any]], **options: Any) -> Iterator[Flask]:
    """The service over ``library`` with an executor built with ``options``."""
    registry_app = create_registry_app(Settings(repo=str(library.path)))
    client = RegistryClient("http://registry.test", transport=httpx.WSGITransport(app=registry_app), timeout=30)
    executor = Executor(model=ScriptedModel.from_replies(replies, source="the test"), registry=client, **options)
    app = create_app(Settings(data_dir=str(data)), executor=executor, registry=client)
    try:
        yield app
    finally:
        app.extensions["agent_protocol.close"]()
        executor.close()
        client.close()
        registry_app.extensions["prompt_registry.service"].close()


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


def test_a_task_does_not_call_a_map_for_another_agents_model_unused(library: LibraryRepo, tmp_path: Path) -> None:
    model_map = {"test-model": "served", "other-model": "served"}
    with service_app(library, tmp_path / "data", [{"content": "drafted"}], model_map=model_map) as app:
        http = app.test_client()
        task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
        last = step(http, task)
    assert last["is_last"] and last["output"] == "drafted"
    assert "warnings" not in last["additional_output"], last["additional_output"]


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
