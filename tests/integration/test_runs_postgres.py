"""Durable runs against real processes on PostgreSQL: a server that only
answers requests and two ``agents worker`` processes sharing one database
of a PostgreSQL server of this module's own (the tests restart it), the
scripted model server every worker calls, and the counted tools of
``tests.support.agent_workers``.

On PostgreSQL a worker's life is a session advisory lock, not a file lock:
the kill test checks that path; the restart test that workers take their
connections and their locks again, and that no task is lost or run twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.agent_workers import (
    Rig,
    act,
    answer,
    call,
    create_task,
    pipeline_inputs,
    rig,
    step_workers,
    steps_of,
    task_events,
    wait_for_status,
    wait_until,
)
from tests.support.postgres_server import PostgresServer, PostgresUnavailable
from tests.support.run_scenarios import (
    FINISHED,
    KILLED_IN_MODEL_CALL_REPLIES,
    a_worker_killed_in_a_model_call_hands_its_task_over,
)

pytestmark = pytest.mark.postgres

HUNDRED = 100
FIRST_OF_A_HUNDRED = 3000
TOOL_PIPELINE = 3000
"""What every one of the hundred tasks asks ``list_jobs`` for: their replies are the same."""
HUNDRED_TASKS_REPLIES: list[dict[str, Any]] = [
    {"when": "^Pipeline 3\\d{3} failed", "content": act("list_jobs", pipeline_id=TOOL_PIPELINE), "repeat": True},
    {"when": f'"pipeline": {TOOL_PIPELINE}\\b', "content": answer("done"), "repeat": True},
]
"""Replies for pipelines 3000 to 3999: a tool call, then the answer."""

UNDER_RESTART = range(4000, 4040)
RESTART_TOOL_PIPELINE = 4000
MODEL_SECONDS = 0.5
"""Each model call of the restart test takes this long, so that tasks are in flight when the server stops
(40 tasks of two calls over 16 slots: seconds, where creating them takes a fraction of one)."""

REPLIES: list[dict[str, Any]] = [
    *KILLED_IN_MODEL_CALL_REPLIES,
    *HUNDRED_TASKS_REPLIES,
    {"when": "^Pipeline 4\\d{3} failed", "content": act("list_jobs", pipeline_id=RESTART_TOOL_PIPELINE),
     "delay": MODEL_SECONDS, "repeat": True},
    {"when": f'"pipeline": {RESTART_TOOL_PIPELINE}\\b', "content": answer("done after the restart"),
     "delay": MODEL_SECONDS, "repeat": True},
]  # fmt: skip


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A server of the module's own: restarting the session's would cut other tests' connections."""
    try:
        server = PostgresServer().start()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shared_rig(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig(tmp_path_factory.mktemp("runs-postgres"), postgres.create_database(), REPLIES) as made:
        yield made


@pytest.fixture
def runs(shared_rig: Rig) -> Rig:
    """The module's rig with two live workers (a test before may have killed one)."""
    shared_rig.replace_dead_workers(2)
    return shared_rig


def test_a_hundred_background_tasks_over_two_workers_all_complete_each_exactly_once(runs: Rig) -> None:
    """Create ``HUNDRED`` background tasks at once; each completes, with two
    steps, two model calls and one tool call, and the two workers share them."""
    pipelines = range(FIRST_OF_A_HUNDRED, FIRST_OF_A_HUNDRED + HUNDRED)
    before = sum(1 for c in runs.tool_calls() if c.argument == TOOL_PIPELINE)
    with ThreadPoolExecutor(max_workers=16) as pool:
        created = list(pool.map(lambda p: create_task(runs.front.base, pipeline_inputs(p)), pipelines))
    task_ids = [task["task_id"] for task in created]
    for task_id in task_ids:
        done = wait_for_status(runs.front.base, task_id, FINISHED)
        assert (done["status"], done["output"]) == ("completed", "done"), done
    for pipeline, task_id in zip(pipelines, task_ids, strict=True):
        steps = steps_of(runs.front.base, task_id)
        assert [(s["additional_output"]["state"], s["is_last"]) for s in steps] == [
            ("completed", False),
            ("completed", True),
        ], steps
        assert len(runs.model_calls(pipeline)) == 2, pipeline
    assert sum(1 for c in runs.tool_calls() if c.argument == TOOL_PIPELINE) - before == HUNDRED
    ran = {worker for _, _, worker in step_workers(task_events(runs.database_url, *task_ids))}
    assert ran == {worker.worker_id for worker in runs.workers}


def test_postgres_restarted_under_load_loses_no_task_and_runs_none_twice(runs: Rig, postgres: PostgresServer) -> None:
    before = len(runs.model.requests())
    with ThreadPoolExecutor(max_workers=16) as pool:
        created = list(pool.map(lambda p: create_task(runs.front.base, pipeline_inputs(p)), UNDER_RESTART))
    task_ids = [task["task_id"] for task in created]
    wait_until(lambda: len(runs.model.requests()) - before >= len(task_ids) // 2, "half the first calls")
    unfinished = [t for t in task_ids if call(runs.front.base, "GET", f"/ap/v1/agent/tasks/{t}")[1]["status"]
                  not in FINISHED]  # fmt: skip
    assert unfinished, "every task ended before the restart: it came under no load"
    postgres.restart(down_seconds=1.0)

    for pipeline, task_id in zip(UNDER_RESTART, task_ids, strict=True):
        done = wait_for_status(runs.front.base, task_id, FINISHED)
        assert (done["status"], done["output"]) == ("completed", "done after the restart"), done
        steps = steps_of(runs.front.base, task_id)
        assert [(s["additional_output"]["state"], s["is_last"]) for s in steps] == [
            ("completed", False),
            ("completed", True),
        ], steps
        assert len(runs.model_calls(pipeline)) == 2, pipeline
    assert sum(1 for c in runs.tool_calls() if c.argument == RESTART_TOOL_PIPELINE) == len(task_ids)


def test_a_worker_killed_in_a_model_call_hands_the_task_to_another_which_makes_only_that_call_again(
    runs: Rig,
) -> None:
    a_worker_killed_in_a_model_call_hands_its_task_over(runs)
