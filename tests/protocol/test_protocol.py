"""The Agent Protocol service, through its HTTP API, over a real git
repository, a real database (SQLite; PostgreSQL in test_protocol_store),
the executor and the scripted model."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import TestResponse

from registry.protocol.states import TRANSITIONS
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import CLASSIFIER_LEAF, GATE_SCHEMA, GATED, REACT, json_leaf, leaf, vote_composite
from tests.support.protocol_service import Service, create, step

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
ADMIN = "admin-0123456789abcdefgh"


@pytest.fixture
def library(repo: LibraryRepo) -> LibraryRepo:
    return repo.release(
        "v1.0.0",
        {
            "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"),
            "s/gate.yml": json_leaf("gate", "Check: {{ reply }}", GATE_SCHEMA, reply="string"),
            "s/gated.yml": GATED,
            "a/react.yml": REACT,
        },
    )


@pytest.fixture
def make(library: LibraryRepo, tmp_path: Path) -> Iterator[Any]:
    made: list[Service] = []

    def make(replies: list[dict[str, Any]], **settings: Any) -> Service:
        service = Service(library, tmp_path / f"data{len(made)}", replies, **settings)
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


def concurrent_steps(service: Service, task_id: str, count: int = 2) -> list[int]:
    """The statuses of ``count`` step requests on one task, sent at once."""
    statuses: list[int] = []

    def post() -> None:
        statuses.append(service.http().post(f"/ap/v1/agent/tasks/{task_id}/steps").status_code)

    threads = [threading.Thread(target=post) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


# --- tasks and steps ---------------------------------------------------------------------


def test_a_leaf_task_runs_to_its_last_step_and_its_answer_is_an_artifact(make: Any) -> None:
    service = make([{"content": "Use Settings."}])
    http = service.http()
    task = create(http, "s/draft", inputs={"question": "How?"}, release="^1")
    assert task["status"] == "created" and task["artifacts"] == []
    assert task["release"]["tag"] == "v1.0.0" and len(task["release"]["commit"]) == 40
    last = step(http, task["task_id"])
    assert (last["is_last"], last["output"], last["status"]) == (True, "Use Settings.", "completed")
    assert last["additional_output"]["outcome"] == "completed" and last["additional_output"]["llm_calls"] == 1
    [answer] = last["artifacts"]
    assert answer["agent_created"] is True and answer["file_name"] == "answer.md"
    body = http.get(f"/ap/v1/agent/tasks/{task['task_id']}/artifacts/{answer['artifact_id']}")
    assert body.data == b"Use Settings." and body.mimetype == "application/octet-stream"
    done = http.get(f"/ap/v1/agent/tasks/{task['task_id']}").get_json()
    assert (done["status"], done["outcome"], done["output"]) == ("completed", "completed", "Use Settings.")


def test_input_fills_the_one_required_string_input(make: Any) -> None:
    service = make([{"when": "^Draft: How do I pay\\?$", "content": "By card."}])
    http = service.http()
    response = http.post(
        "/ap/v1/agent/tasks", json={"input": "How do I pay?", "additional_input": {"agent": "s/draft"}}
    )
    assert response.status_code == 200
    assert step(http, response.get_json()["task_id"])["output"] == "By card."


def test_a_composite_advances_one_model_round_per_step(make: Any) -> None:
    service = make([{"agent": "s/draft", "content": "drafted"}, {"agent": "s/gate", "content": '{"allow": true}'}])
    http = service.http()
    task = create(http, "s/gated", inputs={"question": "q"})
    first = step(http, task["task_id"])
    assert (first["is_last"], first["output"]) == (False, "drafted")
    assert http.get(f"/ap/v1/agent/tasks/{task['task_id']}").get_json()["status"] == "waiting_for_input"
    second = step(http, task["task_id"])
    assert (second["is_last"], second["output"], second["additional_output"]["outcome"]) == (
        True,
        "drafted",
        "completed",
    )
    chats = [s for s in _spans(second["additional_output"]["trace"]) if s["operation"] == "chat"]
    assert [c["attributes"].get("registry.replayed", False) for c in chats] == [True, False]
    steps = http.get(f"/ap/v1/agent/tasks/{task['task_id']}/steps").get_json()
    assert [s["output"] for s in steps["steps"]] == ["drafted", "drafted"]
    assert steps["pagination"] == {"total_items": 2, "total_pages": 1, "current_page": 1, "page_size": 10}


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ({}, "/additional_input/agent"),
        ({"agent": "s/nope"}, "/additional_input"),
        ({"agent": "s/draft", "release": "v9"}, "/additional_input"),
        ({"agent": "s/draft", "inputs": {"question": 3}}, "/additional_input/inputs/question"),
        ({"agent": "s/draft", "inputs": []}, "/additional_input/inputs"),
    ],
)
def test_a_task_that_cannot_run_is_refused_with_422_before_anything_runs(
    make: Any, extra: dict[str, Any], path: str
) -> None:
    http = make([]).http()
    response = http.post("/ap/v1/agent/tasks", json={"additional_input": extra})
    body = response.get_json()
    assert response.status_code == 422 and body["type"] == "/problems/invalid-inputs"
    assert body["message"] == body["detail"] and body["errors"][0]["path"] == path
    assert http.get("/ap/v1/agent/tasks").get_json()["pagination"]["total_items"] == 0


# --- actions -----------------------------------------------------------------------------

ACTION = 'Thought: look it up\nAction: lookup\nAction Input: {"word": "ox"}'


def test_approve_reject_and_edit_decide_a_pending_action(make: Any) -> None:
    replies = [
        {"content": ACTION},
        {"when": "^Observation: The user rejected this call: not that one$", "content": ACTION},
        {"when": "^Observation: cow means something$", "content": ACTION},
        {"when": "^Observation: ox means something$", "content": "Final Answer: an animal"},
    ]
    service = make(replies, require_approval=["lookup"])
    http = service.http()
    task = create(http, "a/react", inputs={"question": "ox?"})["task_id"]
    proposed = step(http, task)
    action = proposed["additional_output"]["action"]
    assert (action["tool"], action["arguments"], action["thought"]) == ("lookup", {"word": "ox"}, "look it up")
    assert proposed["additional_output"]["llm_calls"] == 1
    assert service.calls == []
    step(http, task, expect=409)  # a decision is due
    step(http, task, decision="reject", reason="not that one")
    bad = step(http, task, expect=422, decision="edit", arguments={"word": 3})
    assert "lookup" in bad["detail"]
    step(http, task, decision="edit", arguments={"word": "cow"})
    assert service.calls == [{"word": "cow"}]
    last = step(http, task, decision="approve")
    assert (last["is_last"], last["output"]) == (True, "an animal")
    assert service.calls == [{"word": "cow"}, {"word": "ox"}]
    actions = http.get(f"/ap/v1/agent/tasks/{task}/actions").get_json()["actions"]
    assert [a["status"] for a in actions] == ["rejected", "edited", "approved"]
    step(http, task, expect=409, decision="approve")  # nothing pending, and the task is over


def test_the_last_step_names_branch_replies_that_did_not_pass_their_parser(library: LibraryRepo, make: Any) -> None:
    library.release(
        "v1.1.0", {"s/classify.yml": CLASSIFIER_LEAF, "s/vote.yml": vote_composite("s/classify", n=3, concurrency=3)}
    )
    replies = [
        # The repair round of the reply that is not JSON: no JSON either.
        {"when": "^Your reply is not valid JSON", "content": "tech, really"},
        {"content": '{"label": "tech"}'},
        {"content": "tech, I think"},
        {"content": '{"label": "tech"}'},
    ]
    http = make(replies).http()
    task = create(http, "s/vote", inputs={"question": "q"})["task_id"]
    taken = [step(http, task)]
    while not taken[-1]["is_last"]:
        assert len(taken) < 5, "the vote does not end"
        taken.append(step(http, task))
    state = taken[-1]["additional_output"]
    assert state["outcome"] == "completed" and not any("warnings" in s["additional_output"] for s in taken[:-1])
    assert sum(s["additional_output"]["llm_calls"] for s in taken) == 4
    [warning] = state["warnings"]
    assert "1 of 3 branch replies did not pass their parser" in warning


def test_the_definition_alone_makes_a_tool_wait_for_a_decision(library: LibraryRepo, make: Any) -> None:
    # x-requires-approval on the tool, and no require_approval given to the service.
    marked = REACT.replace(
        "    description: Looks a word up.\n", "    description: Looks a word up.\n    x-requires-approval: true\n"
    )
    assert marked != REACT
    library.release("v1.1.0", {"a/marked.yml": marked})
    replies = [{"content": ACTION}, {"when": "^Observation: ox means something$", "content": "Final Answer: an animal"}]
    service = make(replies)
    http = service.http()
    task = create(http, "a/marked", release="v1.1.0", inputs={"question": "ox?"})["task_id"]
    proposed = step(http, task)
    assert proposed["additional_output"]["action"]["tool"] == "lookup" and service.calls == []
    last = step(http, task, decision="approve")
    assert (last["is_last"], last["output"]) == (True, "an animal") and service.calls == [{"word": "ox"}]


# --- states ------------------------------------------------------------------------------


def test_every_transition_of_the_tables_is_walked_and_every_other_refused(make: Any) -> None:
    replies = [
        {"when": "^Draft: outage$", "error": {"status": 503, "message": "overloaded"}, "repeat": True},
        {"agent": "s/gate", "content": "not JSON", "repeat": True},
        {"content": "done", "repeat": True},
    ]
    service = make(replies)
    http = service.http()

    def task_in(state: str) -> str:
        agent, question = {"failed": ("s/gate", "q"), "waiting_for_input": ("s/draft", "outage")}.get(
            state, ("s/draft", "q")
        )
        task: str = create(http, agent, inputs={"reply" if agent == "s/gate" else "question": question})["task_id"]
        if state in ("completed", "failed", "waiting_for_input"):
            ran = step(http, task)
            if state == "failed":  # the gate's reply did not parse: its repair round is the next step
                ran = step(http, task)
            assert ran["additional_output"]["state"] == ("failed" if state == "waiting_for_input" else "completed")
        elif state == "cancelled":
            assert http.post(f"/ap/v1/agent/tasks/{task}/cancel").status_code == 200
        assert http.get(f"/ap/v1/agent/tasks/{task}").get_json()["status"] == state
        return task

    requests: dict[str, Callable[[str], TestResponse]] = {
        "step": lambda t: http.post(f"/ap/v1/agent/tasks/{t}/steps"),
        "cancel": lambda t: http.post(f"/ap/v1/agent/tasks/{t}/cancel"),
    }
    reachable = ("created", "waiting_for_input", "completed", "failed", "cancelled")
    allowed = {(t.source, t.event) for t in TRANSITIONS if t.entity == "task"}
    for state in reachable:
        for event, send in requests.items():
            response = send(task_in(state))
            if (state, event) in allowed:
                assert response.status_code == 200, (state, event, response.get_json())
            else:
                body = response.get_json()
                assert response.status_code == 409, (state, event)
                assert body["type"] == "/problems/invalid-state" and body["state"] == state


def test_two_concurrent_steps_of_one_task_one_runs_the_other_gets_409(make: Any) -> None:
    service = make([{"content": "slow", "delay": 0.5}])
    http = service.http()
    task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
    assert sorted(concurrent_steps(service, task)) == [200, 409]


# --- access ------------------------------------------------------------------------------


def test_a_task_belongs_to_its_token_and_an_admin_sees_all(make: Any) -> None:
    service = make([], api_tokens=(TOKEN_A, TOKEN_B), admin_tokens=(ADMIN,))
    mine = create(service.http(TOKEN_A), "s/draft", inputs={"question": "q"})["task_id"]
    theirs = service.http(TOKEN_B)
    missing = theirs.get(f"/ap/v1/agent/tasks/{mine}")
    assert missing.status_code == 404 and missing.get_json()["type"] == "/problems/task-not-found"
    assert theirs.post(f"/ap/v1/agent/tasks/{mine}/steps").status_code == 404
    assert theirs.get("/ap/v1/agent/tasks").get_json()["tasks"] == []
    assert service.http(ADMIN).get("/ap/v1/agent/tasks").get_json()["pagination"]["total_items"] == 1
    assert service.http().get("/ap/v1/agent/tasks").status_code == 401
    assert service.http("wrong-token-0123456789").get("/ap/v1/agent/tasks").status_code == 401


# --- hostile input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "page_size=0",
        "page_size=-1",
        "current_page=0",
        "page_size=abc",
        "page_size=1e3",
        "page_size= 1",
        "pagesize=2",
        "page_size=1&page_size=2",
    ],
)
def test_bad_pagination_is_a_400_naming_the_parameter(make: Any, query: str) -> None:
    response = make([]).http().get(f"/ap/v1/agent/tasks?{query}")
    assert response.status_code == 400 and response.get_json()["type"] == "/problems/invalid-request"


def test_a_huge_page_size_is_answered_with_at_most_100(make: Any) -> None:
    http = make([]).http()
    for _ in range(3):
        create(http, "s/draft", inputs={"question": "q"})
    body = http.get("/ap/v1/agent/tasks?page_size=1000000000&current_page=1").get_json()
    assert len(body["tasks"]) == 3 and body["pagination"]["page_size"] == 100
    page = http.get("/ap/v1/agent/tasks?page_size=2&current_page=2").get_json()
    assert len(page["tasks"]) == 1 and page["pagination"]["total_pages"] == 2


@pytest.mark.parametrize(
    "path",
    [
        "/ap/v1/agent/tasks/nope",
        "/ap/v1/agent/tasks/nope/steps",
        "/ap/v1/agent/tasks/nope/artifacts",
        "/ap/v1/agent/tasks/nope/artifacts/x",
    ],
)
def test_unknown_ids_are_404_with_the_protocols_message(make: Any, path: str) -> None:
    response = make([]).http().get(path)
    assert response.status_code == 404 and response.get_json()["message"]


@pytest.mark.parametrize("body", [b"{", b"[]", b'"text"', b"\r", b"\x00\xff"])
def test_a_body_that_is_not_a_json_object_is_a_400(make: Any, body: bytes) -> None:
    response = make([]).http().post("/ap/v1/agent/tasks", data=body, content_type="application/json")
    assert response.status_code == 400 and response.get_json()["type"] == "/problems/invalid-request"


@pytest.mark.parametrize(
    ("relative_path", "status"),
    [
        ("docs/a.txt", 200),
        ("./docs/./a.txt", 200),
        ("docs/../a.txt", 400),
        ("../etc/passwd", 400),
        ("/etc/passwd", 400),
        ("a\x00b", 400),
        ("C:/x", 400),
    ],
)
def test_uploads_are_stored_normalised_and_paths_that_leave_are_refused(
    make: Any, relative_path: str, status: int
) -> None:
    http = make([]).http()
    task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
    response = http.post(
        f"/ap/v1/agent/tasks/{task}/artifacts",
        data={
            "file": (io.BytesIO(b"hello\x00world"), "notes.bin", "application/x-thing"),
            "relative_path": relative_path,
        },
        content_type="multipart/form-data",
    )
    assert response.status_code == status, response.get_json()
    if status == 200:
        artifact = response.get_json()
        assert artifact["agent_created"] is False and artifact["relative_path"] in ("docs/a.txt", "a.txt")
        assert artifact["content_type"] == "application/x-thing" and artifact["size"] == 11
        download = http.get(f"/ap/v1/agent/tasks/{task}/artifacts/{artifact['artifact_id']}")
        assert download.data == b"hello\x00world"


def test_an_upload_without_a_file_part_or_over_the_limit_is_refused(make: Any) -> None:
    http = make([], agents_max_artifact_bytes=1024).http()
    task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
    missing = http.post(
        f"/ap/v1/agent/tasks/{task}/artifacts", data={"relative_path": "a"}, content_type="multipart/form-data"
    )
    assert missing.status_code == 400
    big = http.post(
        f"/ap/v1/agent/tasks/{task}/artifacts",
        data={"file": (io.BytesIO(b"x" * 2048), "big.bin")},
        content_type="multipart/form-data",
    )
    assert big.status_code == 413 and big.get_json()["type"] == "/problems/payload-too-large"


def test_a_hundred_megabyte_upload_is_refused_before_it_is_read(make: Any) -> None:
    http = make([]).http()
    task = create(http, "s/draft", inputs={"question": "q"})["task_id"]
    read = 0

    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def seek(self, offset: int, whence: int = 0) -> int:
            return 0

        def readinto(self, buffer: Any) -> int:
            nonlocal read
            read += len(buffer)
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    response = http.post(
        f"/ap/v1/agent/tasks/{task}/artifacts",
        input_stream=Endless(),
        content_type="multipart/form-data; boundary=x",
        environ_overrides={"CONTENT_LENGTH": str(100 * 1024 * 1024)},
    )
    assert response.status_code == 413
    assert read < 1024 * 1024


def test_the_openapi_document_is_served(make: Any) -> None:
    document = make([]).http().get("/ap/v1/openapi.json").get_json()
    operations = {
        op["operationId"]
        for path in document["paths"].values()
        for op in path.values()
        if isinstance(op, dict) and "operationId" in op
    }
    assert {"createAgentTask", "listAgentTasks", "getAgentTask", "executeAgentTaskStep", "listAgentTaskSteps",
            "getAgentTaskStep", "listAgentTaskArtifacts", "uploadAgentTaskArtifacts", "downloadAgentTaskArtifact"} <= operations  # fmt: skip
    json.dumps(document)


def _spans(span: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield span
    for child in span.get("children", []):
        yield from _spans(child)


def test_a_tool_output_that_is_a_file_becomes_an_artifact_of_its_step(library: LibraryRepo, tmp_path: Path) -> None:
    report_file = {"file_name": "report.csv", "content": "word,meaning\nox,animal\n", "content_type": "text/csv"}
    replies = [{"content": ACTION}, {"when": "report", "content": "Final Answer: see the report"}]
    service = Service(library, tmp_path / "data", replies, tools={"lookup": lambda word: {"artifact": report_file}})
    try:
        http = service.http()
        task = create(http, "a/react", inputs={"question": "ox?"})["task_id"]
        first = step(http, task)
        [report] = first["artifacts"]
        assert (report["file_name"], report["agent_created"], report["content_type"]) == (
            "report.csv",
            True,
            "text/csv",
        )
        assert (
            http.get(f"/ap/v1/agent/tasks/{task}/artifacts/{report['artifact_id']}").data
            == b"word,meaning\nox,animal\n"
        )
        last = step(http, task)
        assert [a["file_name"] for a in last["artifacts"]] == ["answer.md"]
    finally:
        service.close()


def test_tasks_run_the_same_over_postgresql(library: LibraryRepo, tmp_path: Path, postgres_url: str) -> None:
    replies: list[dict[str, Any]] = [
        {"agent": "s/draft", "content": "drafted", "delay": 0.3},
        {"agent": "s/gate", "content": '{"allow": true}'},
    ]
    service = Service(library, tmp_path / "data", replies, agents_database_url=postgres_url)
    try:
        http = service.http()
        task = create(http, "s/gated", inputs={"question": "q"})["task_id"]
        assert sorted(concurrent_steps(service, task)) == [200, 409]
        last = step(http, task)
        assert (last["is_last"], last["output"]) == (True, "drafted")
        assert http.get(f"/ap/v1/agent/tasks/{task}").get_json()["status"] == "completed"
    finally:
        service.close()


def test_a_server_that_starts_leaves_the_steps_of_live_workers_alone(library: LibraryRepo, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'shared.db'}"
    first = Service(library, tmp_path / "a", [{"content": "slow", "delay": 1.0}], agents_database_url=database)
    try:
        task = create(first.http(), "s/draft", inputs={"question": "q"})["task_id"]
        answers: list[int] = []
        running = threading.Thread(
            target=lambda: answers.append(first.http().post(f"/ap/v1/agent/tasks/{task}/steps").status_code)
        )
        running.start()
        time.sleep(0.3)
        # A server with no worker of its own (DBOS runs one per process).
        second = Service(library, tmp_path / "b", [], agents_database_url=database, agents_worker=False)
        second.close()
        running.join()
        steps = first.http().get(f"/ap/v1/agent/tasks/{task}/steps").get_json()["steps"]
        assert answers == [200] and steps[0]["additional_output"]["state"] == "completed"
    finally:
        first.close()


def test_a_json_body_over_the_request_limit_is_a_413(make: Any) -> None:
    http = make([]).http()
    body = b'{"input": "' + b"x" * (1024 * 1024) + b'"}'
    response = http.post("/ap/v1/agent/tasks", data=body, content_type="application/json")
    assert response.status_code == 413 and response.get_json()["type"] == "/problems/payload-too-large"
