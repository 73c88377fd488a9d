"""What the SQLite and the PostgreSQL tests of durable runs both check, over
a rig (``tests.support.agent_workers.rig``) with two workers: a worker
killed in the middle of a model call. Its replies are for the rig's
script; its pipeline is its own."""

from __future__ import annotations

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
