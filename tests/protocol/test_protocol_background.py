"""Background tasks (``additional_input.mode: background``) through the
Agent Protocol's HTTP API: they run on the service's own DBOS worker to
their end or their next approval, over a real git repository and a real
SQLite database, with the scripted model."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from registry.errors import InvalidRequest, PayloadTooLarge
from registry.protocol import events
from registry.protocol.records import Upload
from registry.protocol.service import ANONYMOUS, Caller, Page, TaskService
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import REACT, leaf
from tests.support.protocol_service import Service, create, step

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'


@pytest.fixture
def service(repo: LibraryRepo, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Service]:
    library = repo.release(
        "v1.0.0", {"s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"), "a/react.yml": REACT}
    )
    replies = getattr(request, "param", None) or [
        {"content": ACTION},
        {"when": "^Observation: ox means something$", "content": "Final Answer: an animal"},
    ]
    made = Service(library, tmp_path / "data", replies, require_approval=["lookup"], agents_step_wait=0.5)
    yield made
    made.close()


def settled(http: FlaskClient, task_id: str) -> dict[str, Any]:
    """The task once no worker is on it (queued or running)."""
    for _ in range(1500):
        task: dict[str, Any] = http.get(f"/ap/v1/agent/tasks/{task_id}").get_json()
        if task["status"] not in ("queued", "running"):
            return task
        time.sleep(0.02)
    raise AssertionError(f"task {task_id} is still {task['status']}")


def test_a_background_task_runs_to_its_approval_and_on_to_its_end_without_steps(service: Service) -> None:
    http = service.http()
    task = create(http, "a/react", inputs={"question": "ox?"}, mode="background")
    assert (task["status"], task["mode"]) in {("queued", "background"), ("running", "background")}
    waiting = settled(http, task["task_id"])
    assert waiting["status"] == "waiting_for_input" and service.calls == []
    actions = http.get(f"/ap/v1/agent/tasks/{task['task_id']}/actions").get_json()["actions"]
    assert [(a["tool"], a["status"]) for a in actions] == [("lookup", "pending")]

    # The published client's POST .../steps carries the decision, and answers a step.
    answered = step(http, task["task_id"], decision="approve")
    assert answered["additional_output"]["state"] in ("completed", "failed")
    done = settled(http, task["task_id"])
    assert (done["status"], service.calls) == ("completed", [{"word": "ox"}])
    steps = steps_of(http, task["task_id"])
    assert [s["is_last"] for s in steps] == [False, True] and steps[-1]["output"] == "an animal"
    worker = service.app.extensions["agent_protocol.service"].engine.worker_id
    assert [s["worker"] for s in steps] == [worker, worker]


def test_steps_since_the_last_call_are_answered_once_each(service: Service) -> None:
    http = service.http()
    task_id = create(http, "a/react", inputs={"question": "ox?"}, mode="background")["task_id"]
    settled(http, task_id)
    first = step(http, task_id)
    assert first["additional_output"]["steps_since_last_call"] == [1]
    assert first["additional_output"]["action"]["tool"] == "lookup"
    # Nothing new since: the last step again, without the list.
    again = step(http, task_id)
    assert again["step_id"] == first["step_id"] and "steps_since_last_call" not in again["additional_output"]


def test_a_decision_on_a_background_task_with_nothing_pending_is_a_409(service: Service) -> None:
    http = service.http()
    task_id = create(http, "a/react", inputs={"question": "ox?"}, mode="background")["task_id"]
    settled(http, task_id)
    step(http, task_id, decision="approve")
    settled(http, task_id)
    refused = step(http, task_id, expect=409, decision="approve")
    assert "nothing to decide" in refused["detail"]


def test_an_unknown_mode_is_refused_with_422(service: Service) -> None:
    response = service.http().post(
        "/ap/v1/agent/tasks",
        json={"additional_input": {"agent": "s/draft", "mode": "batch", "inputs": {"question": "q"}}},
    )
    assert response.status_code == 422 and response.get_json()["errors"][0]["path"] == "/additional_input/mode"


def test_the_event_log_tells_the_task_from_queued_to_completed(service: Service) -> None:
    http = service.http()
    task_id = create(http, "a/react", inputs={"question": "ox?"}, mode="background")["task_id"]
    settled(http, task_id)
    step(http, task_id, decision="approve")
    settled(http, task_id)
    store = service.app.extensions["agent_protocol.service"].store
    for _ in range(500):  # the worker appends to the log just after it commits the state
        logged = store.events_after(task_id, 0)
        if logged[-1].kind == events.OUTCOME:
            break
        time.sleep(0.02)
    assert [e.seq for e in logged] == list(range(1, len(logged) + 1))
    states = [e.data["status"] for e in logged if e.kind == events.STATE]
    assert states == ["queued", "running", "waiting_for_input", "queued", "running", "completed"]
    kinds = [e.kind for e in logged]
    assert kinds.count(events.ACTION) == 2 and kinds[-1] == events.OUTCOME
    assert {e.data["worker"] for e in logged if e.kind == events.STEP} == {service.app.extensions[
        "agent_protocol.service"].engine.worker_id}  # fmt: skip


def test_a_cancelled_background_task_runs_no_further_step(service: Service) -> None:
    http = service.http()
    task_id = create(http, "a/react", inputs={"question": "ox?"}, mode="background")["task_id"]
    settled(http, task_id)
    assert http.post(f"/ap/v1/agent/tasks/{task_id}/cancel").status_code == 200
    step(http, task_id, expect=409, decision="approve")
    assert settled(http, task_id)["status"] == "cancelled" and service.calls == []


def test_files_given_with_a_new_task_are_stored_with_it_and_checked_before_anything(service: Service) -> None:
    tasks: TaskService = service.app.extensions["agent_protocol.service"]
    caller = Caller(ANONYMOUS)
    body = {"additional_input": {"agent": "a/react", "mode": "background", "inputs": {"question": "ox?"}}}
    task = tasks.create_task(caller, body, files=[Upload("notes.md", "docs", None, b"# Notes")])
    # In the transaction that queued the task: there before a worker could take it.
    [stored], _ = tasks.list_artifacts(caller, task.task_id, Page(1, 10))
    assert (stored.file_name, stored.relative_path, stored.content_type) == ("notes.md", "docs", "text/markdown")
    assert tasks.artifact(caller, task.task_id, stored.artifact_id)[1] == b"# Notes"
    logged = [entry.data for entry in tasks.store.events_after(task.task_id, 0) if entry.kind == events.ARTIFACT]
    assert [(entry["artifact_id"], entry["agent_created"]) for entry in logged] == [(stored.artifact_id, False)]

    _, before = tasks.list_tasks(caller, Page(1, 10))
    too_large = Upload("big.bin", None, None, b"x" * (tasks.max_artifact_bytes + 1))
    with pytest.raises(PayloadTooLarge):
        tasks.create_task(caller, body, files=[Upload("ok.md", None, None, b"ok"), too_large])
    with pytest.raises(InvalidRequest, match="relative_path"):
        tasks.create_task(caller, body, files=[Upload("a.md", "../../etc", None, b"a")])
    assert tasks.list_tasks(caller, Page(1, 10))[1] == before


def steps_of(http: FlaskClient, task_id: str) -> list[dict[str, Any]]:
    """The task's steps, as ``GET .../steps`` lists them."""
    return list(http.get(f"/ap/v1/agent/tasks/{task_id}/steps").get_json()["steps"])


def draft_in_background(http: FlaskClient) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``s/draft`` run in the background to its end: the task, and its steps."""
    task_id = create(http, "s/draft", inputs={"question": "q"}, mode="background")["task_id"]
    done = settled(http, task_id)
    return done, steps_of(http, task_id)


def logged_states(service: Service, task_id: str) -> list[tuple[str, str | None]]:
    """The task's ``state`` entries, as (status, reason), once its outcome is logged."""
    store = service.app.extensions["agent_protocol.service"].store
    for _ in range(500):  # the outcome is the last entry of a finished task
        logged = store.events_after(task_id, 0)
        if logged and logged[-1].kind == events.OUTCOME:
            return [(e.data["status"], e.data.get("reason")) for e in logged if e.kind == events.STATE]
        time.sleep(0.02)
    raise AssertionError(f"task {task_id}'s log has no outcome")


OVERLOADED_ONCE = [{"error": {"status": 503, "message": "overloaded"}}, {"content": "drafted"}]


@pytest.mark.parametrize("service", [OVERLOADED_ONCE], indirect=True)
def test_a_model_call_that_may_pass_is_tried_again_and_its_state_is_told_once_per_change(service: Service) -> None:
    done, steps = draft_in_background(service.http())
    task_id = done["task_id"]
    assert (done["status"], done["output"]) == ("completed", "drafted")
    assert [s["additional_output"]["state"] for s in steps] == ["failed", "completed"]
    # One `running` when the work starts, one with the failed call's error,
    # none repeated as the second try starts.
    states = logged_states(service, task_id)
    assert [status for status, _ in states] == ["queued", "running", "running", "completed"]
    assert "503" in (states[2][1] or "") and states[1][1] is None


@pytest.mark.parametrize(
    "service",
    [
        [{"error": {"status": 401, "message": "invalid api key"}}, {"content": "never asked"}],
        [{"error": {"status": 400, "message": "context length exceeded"}}, {"content": "never asked"}],
        [{"agent": "someone/else", "content": "not for this agent"}],
    ],
    indirect=True,
    ids=["401", "400", "no-reply-left"],
)
def test_a_model_call_that_will_fail_again_fails_the_background_task_at_once(service: Service) -> None:
    done, steps = draft_in_background(service.http())
    task_id = done["task_id"]
    assert (done["status"], done["outcome"]) == ("failed", "failed")
    assert [s["additional_output"]["state"] for s in steps] == ["failed"]  # one try, no retry
    assert steps[0]["additional_output"]["error"] == done["error"]
    assert [status for status, _ in logged_states(service, task_id)] == ["queued", "running", "failed"]


def test_a_task_store_held_locked_past_the_busy_timeout_answers_503_and_keeps_nothing(
    service: Service, tmp_path: Path
) -> None:
    """Another process holding SQLite's write lock longer than the busy
    timeout (docs/agent-protocol.md, "Durability"): the request waits it
    out and answers a problem, never a 500, and no half of the task is kept."""
    http = service.http()
    before = http.get("/ap/v1/agent/tasks").get_json()["pagination"]["total_items"]
    holder = sqlite3.connect(tmp_path / "data" / "tasks.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, as another process's long write holds it
        response = http.post(
            "/ap/v1/agent/tasks",
            json={"additional_input": {"agent": "s/draft", "mode": "background", "inputs": {"question": "q"}}},
        )
    finally:
        holder.rollback()
        holder.close()
    problem = response.get_json()
    assert (response.status_code, problem["type"]) == (503, "/problems/store-unavailable"), problem
    assert "locked" in problem["detail"] and str(tmp_path) not in problem["detail"]
    assert http.get("/ap/v1/agent/tasks").get_json()["pagination"]["total_items"] == before
