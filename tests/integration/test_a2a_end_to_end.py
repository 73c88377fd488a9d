"""Issue 32's "Done when", end to end with real processes only: a task
started over A2A by the SDK's own client runs in the background, pauses for
an approval given from the registry's UI, resumes on another worker after
the one running it was killed, and streams its answer to a subscriber; the
same task is then read through the Agent Protocol. And the README's A2A
example, run as written against ``agents serve --example``.

The processes: ``agents serve --no-worker`` (the Agent Protocol and A2A
over one store), two ``agents worker`` processes on that store (SQLite; on
PostgreSQL, test_runs_postgres.py kills a worker the same way), the scripted OpenAI-compatible
model server every worker calls, the counted tools of
``tests.support.agent_workers`` (``job_log`` waits for approval), and
``prompt-registry serve``, whose UI at ``/ui`` shows the service's tasks.
The UI is driven as a browser without scripts drives it: its task page
read, its Approve form posted with the session's cookie and CSRF token
(tests/browser/ clicks the same forms in Chromium).

The second worker starts only once the first is in the model call after
the approval, so that the step is the first's until it is killed: the
steps then name two different workers, whatever the queue would have chosen.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from a2a.types import GetTaskRequest, StreamResponse, SubscribeToTaskRequest, Task, TaskState

from registry.a2a.mapping import plain, struct_plain
from tests.support.a2a_calls import data, responses, sdk_client, user_message
from tests.support.agent_workers import (
    AGENT,
    WAIT_SECONDS,
    AgentWorker,
    Rig,
    act,
    answer,
    fleet,
    rig,
    wait_until,
)
from tests.support.servers import REPOSITORY, RegistryProcess, clean_environment
from tests.support.sse import Message, parse
from tests.support.ui_pages import valid_html
from tests.support.waits import LATE

PIPELINE = 3201
JOB = 77
ANSWER = "job 77 ran out of memory: raise its limit"
REPLIES: list[dict[str, Any]] = [
    {"when": f"^Pipeline {PIPELINE} failed", "content": act("job_log", job_id=JOB)},
    # The worker running the step after the approval is killed while this call waits.
    {"when": f"job {JOB}: out of memory", "content": answer("too late"), "delay": LATE},
    {"when": f"job {JOB}: out of memory", "content": answer(ANSWER)},
]
SETTLED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED}


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    # SQLite only: the same kill on PostgreSQL, two workers and its advisory
    # locks, is test_runs_postgres.py's (the suite's time is kept under 15 minutes).
    return f"sqlite:///{tmp_path / 'tasks.db'}"


@pytest.fixture
def service(tmp_path: Path, database_url: str) -> Iterator[Rig]:
    """The service and its first worker; the test starts the second."""
    options = ["--require-approval", "job_log"]
    with rig(tmp_path / "service", database_url, REPLIES, workers=1, options=options) as made:
        yield made


@pytest.fixture
def ui(service: Rig) -> Iterator[RegistryProcess]:
    """The registry, whose UI shows the service's tasks."""
    environment = {**clean_environment(), "REGISTRY_AGENTS_URL": service.front.base}
    with RegistryProcess("--example", env=environment) as process:
        yield process


def agent_url(service: Rig) -> str:
    return f"{service.front.base}/a2a/agents/{AGENT}"


def send(service: Rig) -> Task:
    """The SDK's client sends the question; the task comes back at once."""

    async def sent() -> Task:
        async with sdk_client(agent_url(service)) as client:
            [created] = await responses(client, user_message(data({"pipeline_id": PIPELINE, "question": "Why?"})))
            return created.task

    return asyncio.run(sent())


def settled(service: Rig, task_id: str) -> Task:
    """The task, read with the SDK's client, once it waits for its client or is over."""

    async def poll() -> Task:
        async with sdk_client(agent_url(service)) as client:
            for _ in range(int(WAIT_SECONDS / 0.1)):
                task = await client.get_task(GetTaskRequest(id=task_id))
                if task.status.state in SETTLED:
                    return task
                await asyncio.sleep(0.1)
        raise AssertionError(f"task {task_id} is still {TaskState.Name(task.status.state)}")

    return asyncio.run(poll())


def approve_in_the_ui(ui: RegistryProcess, task_id: str) -> None:
    """Open the task's page, check the action it asks about, and post its Approve form."""
    with httpx.Client(base_url=ui.base, timeout=WAIT_SECONDS) as browser:
        page = browser.get(f"/ui/tasks/{task_id}")
        assert page.status_code == 200, page.text[:1000]
        valid_html(page.text)
        action = re.search(r'<section aria-labelledby="action" class="action">(.*?)</section>', page.text, re.S)
        assert action, page.text
        assert "Waiting for your decision" in action.group(1) and "<code>job_log</code>" in action.group(1)
        shown = re.search(r'<pre tabindex="0">(.*?)</pre>', action.group(1), re.S)
        assert shown and json.loads(shown.group(1)) == {"job_id": JOB}, action.group(1)
        form = re.search(
            r'<form method="post" action="([^"]+)">\s*<input type="hidden" name="csrf_token" value="([^"]+)">'
            r'\s*<input type="hidden" name="decision" value="approve">',
            action.group(1),
        )
        assert form, action.group(1)
        posted = browser.post(form.group(1), data={"csrf_token": form.group(2), "decision": "approve"})
        assert (posted.status_code, posted.headers.get("location")) == (302, f"/ui/tasks/{task_id}"), posted.text


def subscribe(service: Rig, task_id: str, pool: ThreadPoolExecutor) -> Future[list[StreamResponse]]:
    """A subscriber (the SDK's client, resubscribing) following the task in a
    thread of its own: returned once it has the task as it is now; its
    future is every event until the stream ends."""
    started = threading.Event()

    async def follow() -> list[StreamResponse]:
        found: list[StreamResponse] = []
        async with sdk_client(agent_url(service), streaming=True) as client:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                found.append(event)
                started.set()
        return found

    following = pool.submit(asyncio.run, follow())
    started.wait(WAIT_SECONDS)
    assert started.is_set(), following.result(timeout=0)
    return following


def assert_streamed_the_answer(task_id: str, streamed: list[StreamResponse]) -> None:
    """The task as it was when subscribed, its answer as the model gave it, stored, then the end."""
    snapshot, *rest = streamed
    assert (snapshot.task.id, snapshot.task.status.state) == (task_id, TaskState.TASK_STATE_WORKING)
    texts = [e.status_update.status for e in rest if struct_plain(e.status_update.metadata).get("kind") == "text"]
    assert "".join(part.text for status in texts for part in status.message.parts) == ANSWER
    [stored] = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
    assert (stored.name, stored.parts[0].text) == ("answer.md", ANSWER)
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def assert_shown_by_the_agent_protocol(service: Rig, task_id: str, first: AgentWorker, second: AgentWorker) -> None:
    """The task through the Agent Protocol: its answer, its action, its file,
    its steps and the worker of each (the killed one's attempt in its event log)."""
    base = f"{service.front.base}/ap/v1/agent/tasks/{task_id}"
    task = httpx.get(base, timeout=30).json()
    assert (task["status"], task["output"], task["additional_input"]["mode"]) == ("completed", ANSWER, "background")
    steps = httpx.get(f"{base}/steps", timeout=30).json()["steps"]
    assert [(s["number"], s["worker"], s["is_last"]) for s in steps] == [
        (1, first.worker_id, False),
        (2, second.worker_id, True),
    ]
    assert steps[0]["additional_output"]["action"]["tool"] == "job_log" and steps[1]["output"] == ANSWER
    [action] = httpx.get(f"{base}/actions", timeout=30).json()["actions"]
    assert action["status"] == "approved"
    [stored] = httpx.get(f"{base}/artifacts", timeout=30).json()["artifacts"]
    assert (stored["file_name"], stored["step_id"]) == ("answer.md", steps[1]["step_id"])
    assert httpx.get(f"{base}/artifacts/{stored['artifact_id']}", timeout=30).text == ANSWER
    # The task is over: its event stream gives the whole log, then ends.
    with httpx.stream("GET", f"{base}/events", timeout=WAIT_SECONDS) as stream:
        logged = [item for item in parse(stream.iter_lines()) if isinstance(item, Message) and item.event == "step"]
    assert [(m.json()["number"], m.json()["status"], m.json()["worker"]) for m in logged] == [
        (1, "running", first.worker_id),
        (1, "completed", first.worker_id),
        (2, "running", first.worker_id),
        (2, "running", second.worker_id),
        (2, "completed", second.worker_id),
    ]


def test_a_task_sent_over_a2a_waits_for_the_ui_outlives_a_killed_worker_and_streams_its_answer(
    service: Rig, ui: RegistryProcess
) -> None:
    [first] = service.workers
    created = send(service)
    assert created.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert struct_plain(created.metadata)["mode"] == "background"
    task_id = created.id

    # Nobody steps it: it runs on the first worker to its approval.
    waiting = settled(service, task_id)
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    asked = plain(waiting.status.message.parts[1].data)["action"]
    assert (asked["tool"], asked["arguments"]) == ("job_log", {"job_id": JOB})

    approve_in_the_ui(ui, task_id)
    wait_until(lambda: len(service.model_calls(PIPELINE)) == 2, "the model call after the approval")
    second = service.start_worker()
    with ThreadPoolExecutor(max_workers=1) as pool:
        following = subscribe(service, task_id, pool)
        first.kill()
        streamed = following.result(timeout=WAIT_SECONDS)

    assert_streamed_the_answer(task_id, streamed)
    assert_shown_by_the_agent_protocol(service, task_id, first, second)
    # Nothing ran twice: the approved tool once, by the first worker; the killed call made again, once.
    assert [(c.pid, c.tool) for c in service.tool_calls() if c.argument == JOB] == [(first.pid, "job_log")]
    asked_first, killed_call, again = service.model_calls(PIPELINE)
    assert again == killed_call != asked_first
    # The UI shows the task over, with its answer, the approval and the worker of each step.
    page = httpx.get(f"{ui.base}/ui/tasks/{task_id}", timeout=30).text
    assert "data-task-state>completed</span>" in page and ANSWER in page
    assert '<p class="decided">Decided: <strong>approved</strong></p>' in page
    assert re.findall(r"ran on <code>([^<]+)</code>", page) == [first.worker_id, second.worker_id]


# --- the README's example ----------------------------------------------------------------

THINKING_SECONDS = 8
"""How long the model takes over the README's draft here: longer than the
5 s that the SDK's default HTTP client waits for the next byte of a stream,
as a real model's answer may."""
README_URL = "http://localhost:8090"


def readme_a2a_example() -> str:
    """The Python of the README's A2A section, as a reader copies it."""
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    found = re.search(r"The same service answers \[A2A\].*?```python\n(.*?)```", readme, re.S)
    assert found and README_URL in found.group(1)
    return found.group(1)


def test_the_readme_s_a2a_example_follows_a_task_of_a_slow_model_to_its_end(tmp_path: Path) -> None:
    # The README's command, with its replies file taking the time a real model takes.
    replies = yaml.safe_load((REPOSITORY / "library/replies/gated_answer.yml").read_text(encoding="utf-8"))
    replies[0]["delay"] = THINKING_SECONDS
    (tmp_path / "replies.yml").write_text(yaml.safe_dump(replies), encoding="utf-8")
    with fleet(tmp_path / "logs", cwd=tmp_path) as made:
        server = made.server("--example", "--model", "scripted:replies.yml", "--data-dir", str(tmp_path / "data"))
        made.start(server)
        example = readme_a2a_example().replace(README_URL, server.base)
        ran = subprocess.run(
            [sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=WAIT_SECONDS
        )
    assert ran.returncode == 0, ran.stderr[-3000:]
    states = re.findall(r"state: (TASK_STATE_\w+)", ran.stdout)
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED", states
    assert 'name: "answer.md"' in ran.stdout and "Open Settings, then Profile" in ran.stdout
