"""Drive an Agent Protocol service with the protocol's published Python
client, ``agent-protocol-client`` 1.1.0, unmodified, and print one JSON
object of what it saw.

Run by tests/test_protocol_client.py with the interpreter of a venv of its
own (the client needs pydantic<2; ours has pydantic 2)::

    .venv-apclient/bin/python tests/support/ap_client_script.py http://127.0.0.1:PORT

The service must offer the agents of tests/test_protocol.py's library: the
composite ``s/gated`` (two model rounds) and the leaf ``s/draft`` (one).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent_protocol_client import (
    AgentApi,
    ApiClient,
    ApiException,
    Configuration,
    StepRequestBody,
    TaskRequestBody,
)

UPLOAD = b"line one\nline two\x00\xff binary tail\n"
MAX_STEPS = 10


async def drive(base_url: str, upload_dir: Path) -> dict[str, Any]:
    """Run the scenario against ``base_url``; every value the client parsed."""
    seen: dict[str, Any] = {}
    async with ApiClient(Configuration(host=base_url)) as client:
        api = AgentApi(client)

        task = await api.create_agent_task(
            task_request_body=TaskRequestBody(
                input="How do I change my e-mail address?",
                additional_input={"agent": "s/gated", "inputs": {"question": "How do I change my e-mail address?"}},
            )
        )
        seen["task"] = {
            "type": type(task).__name__,
            "task_id": task.task_id,
            "input": task.input,
            "additional_input": task.additional_input,
            "artifacts": [a.file_name for a in task.artifacts],
        }

        path = upload_dir / "notes.bin"
        path.write_bytes(UPLOAD)
        # Before the steps: a finished task takes no more files. The client
        # takes a path and opens the file itself.
        uploaded = await api.upload_agent_task_artifacts(
            task_id=task.task_id, file=str(path), relative_path="docs/notes"
        )
        seen["uploaded"] = {
            "type": type(uploaded).__name__,
            "artifact_id": uploaded.artifact_id,
            "agent_created": uploaded.agent_created,
            "file_name": uploaded.file_name,
            "relative_path": uploaded.relative_path,
        }

        steps: list[dict[str, Any]] = []
        for _ in range(MAX_STEPS):
            step = await api.execute_agent_task_step(task_id=task.task_id, step_request_body=StepRequestBody())
            steps.append(
                {
                    "type": type(step).__name__,
                    "task_id": step.task_id,
                    "step_id": step.step_id,
                    "status": step.status,
                    "output": step.output,
                    "is_last": step.is_last,
                    "outcome": (step.additional_output or {}).get("outcome"),
                    "artifacts": [artifact.file_name for artifact in step.artifacts],
                }
            )
            if step.is_last:
                break
        seen["steps"] = steps

        leaf = await api.create_agent_task(
            task_request_body=TaskRequestBody(input="What is a release?", additional_input={"agent": "s/draft"})
        )
        seen["leaf_task_id"] = leaf.task_id

        tasks = await api.list_agent_tasks(current_page=2, page_size=1)
        seen["tasks_page"] = {
            "task_ids": [t.task_id for t in tasks.tasks],
            "pagination": tasks.pagination.to_dict(),
        }
        step_page = await api.list_agent_task_steps(task_id=task.task_id, current_page=2, page_size=1)
        seen["steps_page"] = {
            "step_ids": [s.step_id for s in step_page.steps],
            "pagination": step_page.pagination.to_dict(),
        }

        got_task = await api.get_agent_task(task_id=task.task_id)
        seen["got_task"] = {
            "task_id": got_task.task_id,
            "artifacts": [a.file_name for a in got_task.artifacts],
        }
        got_step = await api.get_agent_task_step(task_id=task.task_id, step_id=steps[0]["step_id"])
        seen["got_step"] = {"step_id": got_step.step_id, "output": got_step.output, "is_last": got_step.is_last}

        artifacts = await api.list_agent_task_artifacts(task_id=task.task_id)
        seen["artifacts"] = {
            "artifacts": [
                {"file_name": a.file_name, "agent_created": a.agent_created, "relative_path": a.relative_path}
                for a in artifacts.artifacts
            ],
            "pagination": artifacts.pagination.to_dict(),
        }

        downloaded = await api.download_agent_task_artifact(task_id=task.task_id, artifact_id=uploaded.artifact_id)
        seen["download"] = {"type": type(downloaded).__name__, "equal": downloaded == UPLOAD}

        try:
            await api.get_agent_task(task_id="no-such-task")
        except ApiException as exc:
            seen["unknown_task"] = {"status": exc.status, "body": json.loads(exc.body)}
        else:
            seen["unknown_task"] = {"status": None}
    return seen


def main() -> None:
    with tempfile.TemporaryDirectory() as upload_dir:
        seen = asyncio.run(drive(sys.argv[1], Path(upload_dir)))
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
