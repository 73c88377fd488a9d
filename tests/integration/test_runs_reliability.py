"""Durable runs against real processes on SQLite: a server that only answers
requests (``agents serve --no-worker``) and two ``agents worker`` processes
sharing one tasks.db, the scripted OpenAI-compatible model server that every
worker calls, and a tools module that logs each call with its worker's PID.
Workers are killed with SIGKILL in the middle of a model call and of a tool
call; decisions, cancels and other owners' requests race the workers.

One rig serves the module (its processes take seconds to start); each test
names its own pipelines, so that the model's replies and the tools' calls
of one test are never another's, and starts a worker again where a test
before it killed one. The PostgreSQL tests are in test_runs_postgres.py, a
hundred tasks at once among them: on SQLite, two workers at full
concurrency on a loaded machine can hold the write lock from a request for
longer than SQLite's busy timeout (the request answers 503).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from registry.protocol.advance import CANCELLED_WHILE_RUNNING
from registry.protocol.database import MIGRATIONS
from registry.protocol.records import TaskEvent
from registry.store.example import build_example_repository
from tests.support.agent_workers import (
    SLOW_PIPELINE,
    Rig,
    act,
    answer,
    call,
    create_task,
    fleet,
    pipeline_inputs,
    rig,
    step_workers,
    steps_of,
    task_events,
    wait_for_status,
    wait_until,
)
from tests.support.run_scenarios import (
    FINISHED,
    KILLED_IN_MODEL_CALL_REPLIES,
    a_worker_killed_in_a_model_call_hands_its_task_over,
)

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"

KILLED_IN_TOOL_CALL = SLOW_PIPELINE
TRIED_AGAIN = 103
TWO_DECISIONS = 105
OTHER_OWNER = 107
CANCEL_RACES = range(601, 611)
"""One task each, cancelled at a different moment around its only (and last) step's end."""
CANCEL_ACTION_RACES = range(621, 627)
"""One task each, cancelled at a different moment around the end of its step that proposes an action."""
CANCEL_STEP_SECONDS = 0.3
OLD_TASK = "0b7c5d9e-2f51-4c8e-9a43-1d2e3f405162"
OLD_STEP = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"

REPLIES: list[dict[str, Any]] = [
    *KILLED_IN_MODEL_CALL_REPLIES,
    # Killed in the tool call: the model is told the call was interrupted.
    {"when": f"^Pipeline {KILLED_IN_TOOL_CALL} failed", "content": act("list_jobs", pipeline_id=KILLED_IN_TOOL_CALL)},
    {"when": "Error: the call of list_jobs was interrupted", "content": answer("the job list could not be read")},
    # A model call that fails once: the worker tries it again.
    {"when": f"^Pipeline {TRIED_AGAIN} failed", "status": 500, "message": "overloaded"},
    {"when": f"^Pipeline {TRIED_AGAIN} failed", "content": answer("second time lucky")},
    # Approvals (job_log needs one): approved, or rejected with a reason.
    {"when": f"^Pipeline {TWO_DECISIONS} failed", "content": act("job_log", job_id=TWO_DECISIONS)},
    {"when": f"job {TWO_DECISIONS}: out of memory", "content": answer("approved: out of memory")},
    {"when": f"no-logs-{TWO_DECISIONS}", "content": answer("rejected: no logs")},
    {"when": f"^Pipeline {OTHER_OWNER} failed", "content": act("job_log", job_id=OTHER_OWNER)},
    {"when": f"job {OTHER_OWNER}: out of memory", "content": answer("out of memory")},
    # One step, the last, which a cancel races; or one proposing an action (job_log needs approval).
    {
        "when": "^Pipeline 62\\d failed",
        "content": act("job_log", job_id=620),
        "delay": CANCEL_STEP_SECONDS,
        "repeat": True,
    },  # fmt: skip
    {"when": "^Pipeline 6\\d\\d failed", "content": answer("finished"), "delay": CANCEL_STEP_SECONDS, "repeat": True},
]


@pytest.fixture(scope="module")
def shared_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    directory = tmp_path_factory.mktemp("runs")
    tokens = {"REGISTRY_API_TOKENS": f"{TOKEN_A},{TOKEN_B}"}
    url = f"sqlite:///{directory / 'tasks.db'}"
    with rig(directory, url, REPLIES, env=tokens, options=["--require-approval", "job_log"]) as made:
        yield made


@pytest.fixture
def runs(shared_rig: Rig) -> Rig:
    """The module's rig with two live workers (a test before may have killed one)."""
    shared_rig.replace_dead_workers(2)
    return shared_rig


def test_a_worker_killed_in_a_model_call_hands_the_task_to_another_which_makes_only_that_call_again(
    runs: Rig,
) -> None:
    a_worker_killed_in_a_model_call_hands_its_task_over(runs, token=TOKEN_A)


def test_a_worker_killed_in_a_tool_call_hands_the_task_to_another_and_the_tool_is_not_run_again(
    runs: Rig,
) -> None:
    pipeline = KILLED_IN_TOOL_CALL
    task_id = create_task(runs.front.base, pipeline_inputs(pipeline), token=TOKEN_A)["task_id"]
    wait_until(lambda: any(c.argument == pipeline for c in runs.tool_calls()), "the tool call")
    [in_the_tool] = [c for c in runs.tool_calls() if c.argument == pipeline]
    killed = runs.worker_with_pid(in_the_tool.pid)
    killed.kill()

    done = wait_for_status(runs.front.base, task_id, FINISHED, token=TOKEN_A)
    assert (done["status"], done["output"]) == ("completed", "the job list could not be read")
    assert [c for c in runs.tool_calls() if c.argument == pipeline] == [in_the_tool]
    first, after = runs.model_calls(pipeline)  # the first call is not made again
    assert len(after) == len(first) + 2
    assert after[-1]["content"].startswith("Observation: Error: the call of list_jobs was interrupted")
    assert "may or may not have taken effect" in after[-1]["content"]
    [survivor] = [w for w in runs.workers if w is not killed]
    # The step taken over replays the first call, reports the tool call as
    # interrupted, and makes the next call live: one step in all.
    [step] = steps_of(runs.front.base, task_id, token=TOKEN_A)
    assert (step["additional_output"]["state"], step["is_last"]) == ("completed", True)
    logged = step_workers(task_events(runs.database_url, task_id))
    assert [(w, status) for _, status, w in logged] == [
        (killed.worker_id, "running"),
        (survivor.worker_id, "running"),
        (survivor.worker_id, "completed"),
    ]


def test_a_model_call_that_fails_is_tried_again_by_the_worker_as_a_step_of_its_own(runs: Rig) -> None:
    task_id = create_task(runs.front.base, pipeline_inputs(TRIED_AGAIN), token=TOKEN_A)["task_id"]
    done = wait_for_status(runs.front.base, task_id, FINISHED, token=TOKEN_A)
    assert (done["status"], done["output"]) == ("completed", "second time lucky")
    failed, tried = steps_of(runs.front.base, task_id, token=TOKEN_A)
    assert failed["additional_output"]["state"] == "failed" and "overloaded" in failed["additional_output"]["error"]
    assert (tried["additional_output"]["state"], tried["is_last"]) == ("completed", True)
    assert len(runs.model_calls(TRIED_AGAIN)) == 2


def _waiting_for_a_decision(runs: Rig, pipeline: int, token: str) -> str:
    task_id = create_task(runs.front.base, pipeline_inputs(pipeline), token=token)["task_id"]
    assert wait_for_status(runs.front.base, task_id, FINISHED | {"waiting_for_input"}, token=token)["status"] == (
        "waiting_for_input"
    )
    return str(task_id)


def test_of_two_decisions_sent_at_once_one_wins_and_the_other_gets_409(runs: Rig) -> None:
    pipeline = TWO_DECISIONS
    task_id = _waiting_for_a_decision(runs, pipeline, TOKEN_A)
    decisions = {
        "approve": {"decision": "approve"},
        "reject": {"decision": "reject", "reason": f"no-logs-{pipeline}: the logs are private"},
    }
    answers: dict[str, tuple[int, Any]] = {}
    both_ready = threading.Barrier(2)

    def decide(choice: str) -> None:
        both_ready.wait()
        answers[choice] = call(runs.front.base, "POST", f"/ap/v1/agent/tasks/{task_id}/steps",
                               {"additional_input": decisions[choice]}, token=TOKEN_A)  # fmt: skip

    deciding = [threading.Thread(target=decide, args=(choice,)) for choice in decisions]
    for thread in deciding:
        thread.start()
    for thread in deciding:
        thread.join()
    assert sorted(status for status, _ in answers.values()) == [200, 409], answers
    [winner] = [choice for choice, (status, _) in answers.items() if status == 200]
    [(_, refused)] = [answer for choice, answer in answers.items() if choice != winner]
    assert refused["type"] == "/problems/invalid-state", refused

    done = wait_for_status(runs.front.base, task_id, FINISHED, token=TOKEN_A)
    status, listed = call(runs.front.base, "GET", f"/ap/v1/agent/tasks/{task_id}/actions", token=TOKEN_A)
    [action] = listed["actions"]
    ran = [c.tool for c in runs.tool_calls() if c.argument == pipeline]
    if winner == "approve":
        assert (action["status"], action["reason"], ran) == ("approved", None, ["job_log"])
        assert done["output"] == "approved: out of memory"
    else:
        assert (action["status"], ran) == ("rejected", [])
        assert done["output"] == "rejected: no logs"
    assert len(runs.model_calls(pipeline)) == 2


def test_a_decision_or_a_cancel_on_another_owners_task_is_404_and_changes_nothing(runs: Rig) -> None:
    pipeline = OTHER_OWNER
    task_id = _waiting_for_a_decision(runs, pipeline, TOKEN_A)
    task = f"/ap/v1/agent/tasks/{task_id}"
    approve = {"additional_input": {"decision": "approve"}}
    for method, path, body in [
        ("POST", f"{task}/steps", approve),
        ("POST", f"{task}/cancel", None),
        ("GET", f"{task}/actions", None),
        ("GET", f"{task}/steps", None),
    ]:
        status, refused = call(runs.front.base, method, path, body, token=TOKEN_B)
        assert (status, refused["type"]) == (404, "/problems/task-not-found"), (path, refused)
    assert call(runs.front.base, "GET", task, token=TOKEN_A)[1]["status"] == "waiting_for_input"
    [action] = call(runs.front.base, "GET", f"{task}/actions", token=TOKEN_A)[1]["actions"]
    assert action["status"] == "pending"
    assert [c for c in runs.tool_calls() if c.argument == pipeline] == []

    status, _ = call(runs.front.base, "POST", f"{task}/steps", approve, token=TOKEN_A)
    assert status == 200
    done = wait_for_status(runs.front.base, task_id, FINISHED, token=TOKEN_A)
    assert (done["status"], done["output"]) == ("completed", "out of memory")
    assert [c.tool for c in runs.tool_calls() if c.argument == pipeline] == ["job_log"]


def test_a_cancel_racing_the_last_step_ends_the_task_cancelled_or_completed_never_both(runs: Rig) -> None:
    # Each task's only step is its last, or proposes an action; its model
    # call takes CANCEL_STEP_SECONDS. The cancels are sent from at once after
    # the task is created (queued, or just taken) to after its step has ended.
    def offsets(count: int) -> list[float | None]:
        return [None] + [i * 0.5 / (count - 1) for i in range(count - 1)]

    races = [*zip(CANCEL_RACES, offsets(len(CANCEL_RACES)), strict=True),
             *zip(CANCEL_ACTION_RACES, offsets(len(CANCEL_ACTION_RACES)), strict=True)]  # fmt: skip
    tasks: dict[int, str] = {}
    cancels: dict[int, int] = {}

    def create_and_cancel(pipeline: int, offset: float | None) -> None:
        task_id = tasks[pipeline] = create_task(runs.front.base, pipeline_inputs(pipeline), token=TOKEN_A)["task_id"]
        if offset is not None:
            wait_until(lambda: runs.model_calls(pipeline) != [], f"the model call of pipeline {pipeline}")
            time.sleep(offset)
        cancels[pipeline] = call(runs.front.base, "POST", f"/ap/v1/agent/tasks/{task_id}/cancel", token=TOKEN_A)[0]

    racing = [threading.Thread(target=create_and_cancel, args=race) for race in races]
    for thread in racing:
        thread.start()
    for thread in racing:
        thread.join()
    assert set(cancels.values()) <= {200, 409} and len(cancels) == len(races), cancels
    for pipeline in CANCEL_RACES:
        _assert_ended_one_way(runs, tasks[pipeline], cancelled=cancels[pipeline] == 200)
    for pipeline in CANCEL_ACTION_RACES:
        # A task waiting for a decision can be cancelled too: every cancel wins.
        assert cancels[pipeline] == 200
        _assert_cancelled_with_the_action_only_if_proposed_first(runs, tasks[pipeline])


def _assert_ended_one_way(runs: Rig, task_id: str, *, cancelled: bool) -> None:
    """The task ended as its cancel's answer says, and stays so once no step
    of it runs: its steps, its files and its event log agree, and no step
    began after a cancel. A step that was running when the cancel came ends
    failed, with no answer and no file (docs/agent-protocol.md's state table)."""
    task, steps, logged = _ended(runs, task_id)
    states = [e.data["status"] for e in logged if e.kind == "state"]
    outcomes = [e.data for e in logged if e.kind == "outcome"]
    artifacts = call(runs.front.base, "GET", f"/ap/v1/agent/tasks/{task_id}/artifacts", token=TOKEN_A)[1]
    if cancelled:
        assert (task["status"], task["outcome"], task["output"]) == ("cancelled", None, None), task
        assert (states[-1], [s for s in states if s in FINISHED], outcomes) == ("cancelled", ["cancelled"], [])
        assert artifacts["artifacts"] == [] and [e for e in logged if e.kind == "artifact"] == [], artifacts
        _assert_ended_after_the_cancel(steps, logged)
    else:
        assert (task["status"], task["outcome"], task["output"]) == ("completed", "completed", "finished"), task
        assert (states[-1], [s for s in states if s in FINISHED]) == ("completed", ["completed"])
        assert outcomes == [{"outcome": "completed", "output": "finished", "error": None}]
        [step] = steps
        assert (step["is_last"], step["output"], step["additional_output"]["state"]) == (True, "finished", "completed")
        assert [a["file_name"] for a in artifacts["artifacts"]] == ["answer.md"], artifacts


def _assert_cancelled_with_the_action_only_if_proposed_first(runs: Rig, task_id: str) -> None:
    """A cancelled task has a pending action only if its step ended first
    (the task waited for the decision when the cancel came, and the action
    stays undecided); a step that ended after the cancel proposed nothing."""
    task, steps, logged = _ended(runs, task_id)
    assert (task["status"], task["outcome"]) == ("cancelled", None), task
    states = [e.data["status"] for e in logged if e.kind == "state"]
    actions = call(runs.front.base, "GET", f"/ap/v1/agent/tasks/{task_id}/actions", token=TOKEN_A)[1]["actions"]
    proposed = [e.data for e in logged if e.kind == "action"]
    if "waiting_for_input" in states:
        assert states[-2:] == ["waiting_for_input", "cancelled"], states
        [step] = steps
        assert step["additional_output"]["state"] == "completed"
        assert (
            [(a["tool"], a["status"]) for a in actions]
            == [("job_log", "pending")]
            == [(a["tool"], a["status"]) for a in proposed]
        )
    else:
        assert (actions, proposed) == ([], []), actions
        _assert_ended_after_the_cancel(steps, logged)


def _assert_ended_after_the_cancel(steps: list[dict[str, Any]], logged: list[TaskEvent]) -> None:
    """The cancelled task's step, if one began: failed, with no answer, after
    the cancel in the log too (the step's end lost the race)."""
    if not steps:
        return
    [step] = steps
    ended = (step["output"], step["is_last"], step["additional_output"]["state"], step["additional_output"]["error"])
    assert ended == (None, True, "failed", CANCELLED_WHILE_RUNNING), step
    kinds = [(e.kind, e.data.get("status")) for e in logged if e.kind in ("step", "state")]
    assert kinds[-2:] == [("state", "cancelled"), ("step", "failed")], kinds


def _ended(runs: Rig, task_id: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[TaskEvent]]:
    """The task, its steps and its event log once no step of it runs."""
    wait_until(
        lambda: all(s["additional_output"]["state"] != "running" for s in steps_of(runs.front.base, task_id,
                    token=TOKEN_A)), f"the end of the steps of task {task_id}")  # fmt: skip
    task = wait_for_status(runs.front.base, task_id, FINISHED, token=TOKEN_A)
    steps = steps_of(runs.front.base, task_id, token=TOKEN_A)
    assert task["steps"] == len(steps) <= 1, (task, steps)
    return task, steps, task_events(runs.database_url, task_id)


def test_a_tasks_db_of_revision_0002_migrates_when_a_server_starts_and_its_tasks_run_once_a_worker_does(
    tmp_path: Path,
) -> None:
    repository = build_example_repository(tmp_path / "library")
    database = tmp_path / "tasks.db"
    task_id, step_id = _old_database_with_a_running_step(f"sqlite:///{database}", repository)
    (tmp_path / "script.yml").write_text(
        "- content: 'Open Settings, then Profile.'\n  repeat: true\n", encoding="utf-8"
    )
    options = ["--repo", str(repository), "--database-url", f"sqlite:///{database}", "--model", "scripted:script.yml"]
    with fleet(tmp_path / "logs", cwd=tmp_path) as made:
        # A server alone first: no worker has ever run on this database.
        front = made.server("--no-worker", *options)
        made.start(front)
        task = call(front.base, "GET", f"/ap/v1/agent/tasks/{task_id}")[1]
        assert (task["status"], task["steps"]) == ("waiting_for_input", 1)
        [interrupted] = steps_of(front.base, task_id)
        assert interrupted["step_id"] == step_id
        assert interrupted["additional_output"]["state"] == "failed"
        assert "upgraded while this step ran" in interrupted["additional_output"]["error"]
        status, queued = call(front.base, "POST", "/ap/v1/agent/tasks", {
            "input": "How do I change my e-mail address?",
            "additional_input": {"agent": "support/draft_answer", "mode": "background"},
        })  # fmt: skip
        assert (status, queued["status"]) == (200, "queued"), queued

        made.start(made.worker(*options))
        done = wait_for_status(front.base, queued["task_id"], FINISHED)
        assert (done["status"], done["output"]) == ("completed", "Open Settings, then Profile."), done
        status, step = call(front.base, "POST", f"/ap/v1/agent/tasks/{task_id}/steps", {})
        assert status == 200, step
        assert (step["is_last"], step["output"], step["number"]) == (True, "Open Settings, then Profile.", 2)
    with create_engine(f"sqlite:///{database}").connect() as db:
        assert db.execute(text("SELECT version_num FROM alembic_version")).scalar_one() != "0002"
        assert "runners" not in {row[0] for row in db.execute(text("SELECT name FROM sqlite_master"))}


def _old_database_with_a_running_step(url: str, repository: Path) -> tuple[str, str]:
    """A tasks.db as the service of revision 0002 left it when its process died
    mid-step: a stepped task running, its step running on a runner."""
    engine = create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
        tag = "v1.1.0"
        with git.Repo(repository) as repo:
            commit = repo.tags[tag].commit.hexsha
        now = "2026-11-20 10:00:00"
        connection.execute(
            text(
                "INSERT INTO tasks (task_id, owner, input, additional_input, agent, release_requested, release_tag,"
                " release_commit, digest, inputs, status, created_at, updated_at, steps, running_step_id)"
                " VALUES (:task, 'anonymous', 'How do I change my e-mail address?',"
                " '{\"agent\": \"support/draft_answer\"}', 'support/draft_answer', :tag, :tag, :commit,"
                " 'sha256:0', '{\"question\": \"How do I change my e-mail address?\"}', 'running', :now, :now, 1,"
                " :step)"
            ),
            {"task": OLD_TASK, "step": OLD_STEP, "tag": tag, "commit": commit, "now": now},
        )
        connection.execute(
            text(
                "INSERT INTO steps (step_id, task_id, number, status, created_at, additional_input, is_last,"
                " runner_id) VALUES (:step, :task, 1, 'running', :now, '{}', 0, 'gone-runner')"
            ),
            {"task": OLD_TASK, "step": OLD_STEP, "now": now},
        )
        connection.execute(
            text(
                "INSERT INTO runners (runner_id, host, pid, started_at, seen_at)"
                " VALUES ('gone-runner', 'old-host', 4242, :now, :now)"
            ),
            {"now": now},
        )
    engine.dispose()
    return OLD_TASK, OLD_STEP
