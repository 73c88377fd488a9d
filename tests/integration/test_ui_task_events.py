"""A task page's live events (``/ui/tasks/<id>/events``): the registry's UI
(a real ``prompt-registry serve``, gevent workers) relaying the stream of a
real ``prompt-registry agents serve``, read by httpx. The page that reads
them in a browser is tests/browser/test_ui_browser.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.servers import RegistryProcess, clean_environment, live_workers
from tests.support.sse import Subscriber
from tests.support.triage_agent import triage_service_command

STREAMS = 40
"""More streams at once than any thread pool of the registry has threads."""


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    directory = tmp_path_factory.mktemp("agents")
    port = free_port()
    environment = {**clean_environment(), "REGISTRY_AGENTS_EVENTS_HEARTBEAT": "0.5"}
    with RegistryProcess(
        command=triage_service_command(directory, port), port=port, cwd=directory, env=environment
    ) as process:
        yield process


@pytest.fixture(scope="module")
def registry(agents: RegistryProcess) -> Iterator[RegistryProcess]:
    with RegistryProcess("--example", env={**clean_environment(), "REGISTRY_AGENTS_URL": agents.base}) as process:
        yield process


def create_task(agents: RegistryProcess) -> str:
    body = {"additional_input": {"agent": "assistant/react_text", "inputs": {"pipeline_id": 7, "question": "Why?"}}}
    created = httpx.post(agents.base + "/ap/v1/agent/tasks", json=body, timeout=30)
    assert created.status_code == 200, created.text
    return str(created.json()["task_id"])


def step(agents: RegistryProcess, task: str, **additional: str) -> None:
    answer = httpx.post(
        f"{agents.base}/ap/v1/agent/tasks/{task}/steps", json={"additional_input": additional}, timeout=60
    )
    assert answer.status_code == 200, answer.text


def test_the_ui_relays_a_task_s_events_as_they_come_and_resumes_after_last_event_id(
    agents: RegistryProcess, registry: RegistryProcess
) -> None:
    task = create_task(agents)
    page = Subscriber(f"{registry.base}/ui/tasks/{task}/events")
    assert page.status == 200
    step(agents, task)
    waiting = page.until(lambda m: m.event == "action")
    assert [m.event for m in waiting] == ["state", "state", "state", "step", "tool_call", "action"]
    resumed = Subscriber(f"{registry.base}/ui/tasks/{task}/events", headers={"Last-Event-ID": "3"})
    assert [m.id for m in resumed.until(lambda m: m.event == "action")] == ["4", "5", "6"]
    step(agents, task, decision="approve")
    rest = page.rest()
    assert rest[-1].event == "outcome" and rest[-1].json()["outcome"] == "completed"
    assert [int(m.id or 0) for m in waiting + rest] == list(range(1, len(waiting) + len(rest) + 1))
    assert resumed.rest()[-1].event == "outcome"


def test_a_task_the_service_does_not_know_is_a_404_page(registry: RegistryProcess) -> None:
    answer = httpx.get(f"{registry.base}/ui/tasks/0123abcd/events", timeout=30)
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html")


def test_streams_held_open_at_once_outnumber_threads_and_take_none(
    agents: RegistryProcess, registry: RegistryProcess
) -> None:
    [worker] = live_workers(registry.master())
    threads_before = worker.num_threads()
    task = create_task(agents)
    # Each gets its answer and the task's first entry while all the others stay open.
    pages = [Subscriber(f"{registry.base}/ui/tasks/{task}/events") for _ in range(STREAMS)]
    assert all(page.until(lambda m: m.id is not None)[0].id == "1" for page in pages)
    # gevent: a stream is a greenlet waiting on its socket, not a thread.
    assert worker.num_threads() < threads_before + STREAMS // 4, (threads_before, worker.num_threads())
    step(agents, task)
    assert all(page.until(lambda m: m.event == "action")[-1].json()["tool"] == "list_jobs" for page in pages)
    for page in pages:
        page.close()
