"""A model call that fails during a step (an outage, a timeout, a refused
connection) fails the step, not the task: the next step makes the call
again and replays everything before it. The model is a real
OpenAI-compatible HTTP server, reached through the official SDK."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from registry.executor import OpenAIChatModel
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import GATE_SCHEMA, GATED, json_leaf, leaf
from tests.support.openai_server import ScriptedModelServer
from tests.support.protocol_service import Service, create, step

DRAFT = leaf("drafter", "Draft: {{ question }}", question="string").replace(
    "model: {name: test-model,", "params: {timeout: 1}\nmodel: {name: test-model,"
)


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    return repo.release(
        "v1.0.0",
        {
            "s/draft.yml": DRAFT,
            "s/gate.yml": json_leaf("gate", "Check: {{ reply }}", GATE_SCHEMA, reply="string"),
            "s/gated.yml": GATED,
        },
    )


@pytest.fixture
def serve(library: LibraryRepo, tmp_path: Path) -> Iterator[Any]:
    """The service over ``library``, calling ``server`` without retries."""
    made: list[Service] = []

    def serve(server: ScriptedModelServer, **options: Any) -> FlaskClient:
        model = OpenAIChatModel(base_url=server.base_url, api_key="k", max_retries=0)
        service = Service(library, tmp_path / f"data{len(made)}", [], model=model, **options)
        made.append(service)
        return service.http()

    yield serve
    for service in made:
        service.close()


def spans(span: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield span
    for child in span.get("children", []):
        yield from spans(child)


def status_of(http: FlaskClient, task: str) -> str:
    status: str = http.get(f"/ap/v1/agent/tasks/{task}").get_json()["status"]
    return status


def test_a_failed_model_call_fails_the_step_and_the_next_step_retries_it_without_repeating_the_rest(
    serve: Any, tmp_path: Path
) -> None:
    replies: list[dict[str, Any]] = [
        {"when": "^Draft: ", "content": "drafted"},
        {"when": "^Check: ", "status": 503},
        {"when": "^Check: ", "content": '{"allow": true}'},
    ]
    with ScriptedModelServer(replies, tmp_path) as server:
        http = serve(server)
        task = create(http, "s/gated", inputs={"question": "q"})["task_id"]
        assert step(http, task)["output"] == "drafted"
        failed = step(http, task)
        state = failed["additional_output"]
        assert (failed["is_last"], state["state"], state["llm_calls"], state["llm_replies"]) == (False, "failed", 1, 0)
        assert "the model call for s/gate failed" in state["error"] and "post a new step" in state["error"]
        assert status_of(http, task) == "waiting_for_input"
        last = step(http, task)
        assert (last["is_last"], last["additional_output"]["outcome"], last["output"]) == (True, "completed", "drafted")
        assert status_of(http, task) == "completed"
        sent = [r["messages"][-1]["content"] for r in server.requests()]
    assert [text.split(":")[0] for text in sent] == ["Draft", "Check", "Check"]
    steps = http.get(f"/ap/v1/agent/tasks/{task}/steps").get_json()["steps"]
    assert [s["additional_output"]["state"] for s in steps] == ["completed", "failed", "completed"]


def test_a_model_call_that_times_out_fails_the_step_and_the_task_goes_on(serve: Any, tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"content": "late", "delay": 3}, {"content": "on time"}]
    with ScriptedModelServer(replies, tmp_path) as server:
        http = serve(server)
        task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
        failed = step(http, task)
        assert failed["additional_output"]["state"] == "failed" and "1 s" in failed["additional_output"]["error"]
        [chat] = [s for s in spans(failed["additional_output"]["trace"]) if s["operation"] == "chat"]
        assert chat["attributes"]["registry.error.reason"] == "timeout"
        assert step(http, task)["output"] == "on time"


def test_a_model_server_that_is_down_fails_the_step_and_once_back_the_task_completes(
    serve: Any, tmp_path: Path
) -> None:
    server = ScriptedModelServer([{"content": "back again"}], tmp_path)
    http = serve(server)
    task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
    down = step(http, task)
    assert down["additional_output"]["state"] == "failed" and status_of(http, task) == "waiting_for_input"
    with server:
        last = step(http, task)
    assert (last["is_last"], last["output"]) == (True, "back again")
    assert status_of(http, task) == "completed"


def test_a_step_that_reaches_the_services_time_limit_waiting_for_the_model_fails_and_the_task_goes_on(
    serve: Any, tmp_path: Path
) -> None:
    # The service's own limit (agents serve --timeout) is shorter than the definition's.
    replies: list[dict[str, Any]] = [
        {"when": "^Check: ", "content": "late", "delay": 3},
        {"content": "drafted"},
        {"content": '{"allow": true}'},
    ]
    with ScriptedModelServer(replies, tmp_path) as server:
        http = serve(server, run_timeout=0.5)
        task = create(http, "s/gated", inputs={"question": "q"})["task_id"]
        assert step(http, task)["output"] == "drafted"
        failed = step(http, task)
        state = failed["additional_output"]
        assert (failed["is_last"], state["state"]) == (False, "failed"), state.get("error")
        assert "time limit" in state["error"] and status_of(http, task) == "waiting_for_input"
        last = step(http, task)
        assert (last["is_last"], last["additional_output"]["outcome"]) == (True, "completed")
