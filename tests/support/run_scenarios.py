"""What the SQLite and the PostgreSQL tests of durable runs both check, over
a rig (``tests.support.agent_workers.rig``) with two workers: a worker
killed in the middle of a model call, and a hundred background tasks at
once. Each scenario's replies are for the rig's script; its pipelines are
its own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.support.agent_workers import (
    Rig,
    act,
    answer,
    create_task,
    pipeline_inputs,
    step_workers,
    steps_of,
    task_events,
    wait_for_status,
    wait_until,
)
from tests.support.waits import LATE

FINISHED = frozenset({"completed", "failed", "cancelled"})

KILLED_IN_MODEL_CALL = 101
KILLED_IN_MODEL_CALL_REPLIES: list[dict[str, Any]] = [
    {"when": f"^Pipeline {KILLED_IN_MODEL_CALL} failed", "content": act("list_jobs", pipeline_id=KILLED_IN_MODEL_CALL)},
    # The worker is killed while this call waits; the one that takes the task over makes it again.
    {"when": f'"pipeline": {KILLED_IN_MODEL_CALL}\\b', "content": answer("too late"), "delay": LATE},
    {"when": f'"pipeline": {KILLED_IN_MODEL_CALL}\\b', "content": answer("job 88 of pipeline 101 failed")},
]

HUNDRED = 100
FIRST_OF_A_HUNDRED = 3000
TOOL_PIPELINE = 3000
"""What every one of the hundred tasks asks ``list_jobs`` for: their replies are the same."""
HUNDRED_TASKS_REPLIES: list[dict[str, Any]] = [
    {"when": "^Pipeline 3\\d{3} failed", "content": act("list_jobs", pipeline_id=TOOL_PIPELINE), "repeat": True},
    {"when": f'"pipeline": {TOOL_PIPELINE}\\b', "content": answer("done"), "repeat": True},
]
"""Replies for pipelines 3000 to 3999: a tool call, then the answer."""


def a_worker_killed_in_a_model_call_hands_its_task_over(rig: Rig, *, token: str | None = None) -> None:
    """``kill -9`` of the worker whose model call is in flight: another takes
    the task over and makes that call again, and no other; the tool the
    first one ran is not run again; the task completes with both steps."""
    pipeline = KILLED_IN_MODEL_CALL
    task_id = create_task(rig.front.base, pipeline_inputs(pipeline), token=token)["task_id"]
    wait_until(lambda: len(rig.model_calls(pipeline)) == 2, "the second model call")
    running = [worker for _, _, worker in step_workers(task_events(rig.database_url, task_id))]
    killed = rig.worker_with_id(running[-1])
    killed.kill()

    done = wait_for_status(rig.front.base, task_id, FINISHED, token=token)
    assert (done["status"], done["output"]) == ("completed", "job 88 of pipeline 101 failed"), done
    first, killed_call, again = rig.model_calls(pipeline)  # and no fourth
    assert again == killed_call and first != killed_call
    ran = [(c.pid, c.tool) for c in rig.tool_calls() if c.argument == pipeline]
    assert ran == [(killed.pid, "list_jobs")]
    steps = steps_of(rig.front.base, task_id, token=token)
    assert [(s["number"], s["additional_output"]["state"], s["is_last"]) for s in steps] == [
        (1, "completed", False),
        (2, "completed", True),
    ]
    [survivor] = [w for w in rig.workers if w is not killed]
    second = steps[1]["step_id"]
    logged = [(w, status) for step, status, w in step_workers(task_events(rig.database_url, task_id)) if step == second]
    assert logged == [(killed.worker_id, "running"), (survivor.worker_id, "running"), (survivor.worker_id, "completed")]


def hundred_tasks_complete_once(rig: Rig, *, token: str | None = None) -> None:
    """Create ``HUNDRED`` background tasks at once; each completes, with two
    steps, two model calls and one tool call, and the two workers share them."""
    pipelines = range(FIRST_OF_A_HUNDRED, FIRST_OF_A_HUNDRED + HUNDRED)
    before = sum(1 for c in rig.tool_calls() if c.argument == TOOL_PIPELINE)
    with ThreadPoolExecutor(max_workers=16) as pool:
        created = list(pool.map(lambda p: create_task(rig.front.base, pipeline_inputs(p), token=token), pipelines))
    task_ids = [task["task_id"] for task in created]
    for task_id in task_ids:
        done = wait_for_status(rig.front.base, task_id, FINISHED, token=token)
        assert (done["status"], done["output"]) == ("completed", "done"), done
    for pipeline, task_id in zip(pipelines, task_ids, strict=True):
        steps = steps_of(rig.front.base, task_id, token=token)
        assert [(s["additional_output"]["state"], s["is_last"]) for s in steps] == [
            ("completed", False),
            ("completed", True),
        ], steps
        assert len(rig.model_calls(pipeline)) == 2, pipeline
    assert sum(1 for c in rig.tool_calls() if c.argument == TOOL_PIPELINE) - before == HUNDRED
    ran = {worker for _, _, worker in step_workers(task_events(rig.database_url, *task_ids))}
    assert ran == {worker.worker_id for worker in rig.workers}
