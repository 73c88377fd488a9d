"""The UI's tasks pages over a real Agent Protocol service (``prompt-registry
agents serve`` with a scripted model and a tool that waits for approval), read
through Flask's test client. The same in a browser is in
tests/browser/test_ui_browser.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.serving.app import create_app
from registry.serving.ui.tasks import AGENT_SERVICE_KEY
from registry.settings import Settings
from tests.support.ports import free_port
from tests.support.servers import RegistryProcess
from tests.support.triage_agent import triage_service_command
from tests.support.ui_pages import csrf, page


class AgentServer(RegistryProcess):
    def create_task(self, mode: str = "stepped", **inputs: Any) -> str:
        body = {"additional_input": {"agent": "assistant/react_text", "mode": mode, "inputs": inputs}}
        created = httpx.post(self.base + "/ap/v1/agent/tasks", json=body, timeout=30)
        assert created.status_code == 200, created.text
        return str(created.json()["task_id"])

    def connections_from(self, process: psutil.Process) -> set[int]:
        """The local ports of ``process``'s open connections to this server."""
        return {
            c.laddr.port
            for c in process.net_connections(kind="tcp")
            if c.raddr and c.raddr.port == self.port and c.status == psutil.CONN_ESTABLISHED
        }


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    directory = tmp_path_factory.mktemp("agents")
    port = free_port()
    command = triage_service_command(directory, port)
    with AgentServer(command=command, port=port, cwd=directory) as process:
        yield process


@pytest.fixture
def ui_app(example: Path, agents: AgentServer) -> Iterator[Flask]:
    app = create_app(Settings(repo=str(example), agents_url=agents.base))
    yield app
    app.extensions[AGENT_SERVICE_KEY].close()
    app.extensions["prompt_registry.service"].close()


@pytest.fixture
def ui(ui_app: Flask) -> FlaskClient:
    return ui_app.test_client()


def test_the_pages_of_a_process_reuse_one_connection_to_the_service(agents: AgentServer, ui: FlaskClient) -> None:
    task = agents.create_task(pipeline_id=7, question="Why?")
    this = psutil.Process()
    seen: list[set[int]] = []
    for _ in range(3):
        page(ui, "/ui/tasks")
        seen.append(agents.connections_from(this))
        page(ui, f"/ui/tasks/{task}")  # three requests
        seen.append(agents.connections_from(this))
    # After every page, one connection is open and kept for the next: the same one.
    assert all(len(ports) == 1 for ports in seen) and len(set.union(*seen)) == 1, seen


def test_closing_the_pool_closes_its_connection_and_the_next_page_opens_one(
    agents: AgentServer, ui_app: Flask, ui: FlaskClient
) -> None:
    this = psutil.Process()
    page(ui, "/ui/tasks")
    [first] = agents.connections_from(this)
    ui_app.extensions[AGENT_SERVICE_KEY].close()
    assert agents.connections_from(this) == set()
    page(ui, "/ui/tasks")
    assert len(agents.connections_from(this)) == 1 and first not in agents.connections_from(this)


def run_to_the_action(ui: FlaskClient, task: str) -> str:
    """Posts the first step of ``task`` in the UI; the task page, its action waiting."""
    form = page(ui, f"/ui/tasks/{task}")
    stepped = ui.post(f"/ui/tasks/{task}/steps", data={"csrf_token": csrf(form)})
    assert stepped.status_code == 302, stepped.get_data(as_text=True)[:1000]
    return page(ui, f"/ui/tasks/{task}")


def test_a_task_page_shows_the_inputs_and_when_it_was_created(agents: AgentServer, ui: FlaskClient) -> None:
    task = agents.create_task(pipeline_id=7, question="Why did it fail?")
    text = page(ui, f"/ui/tasks/{task}")
    inputs = re.search(r"<dt>Inputs</dt><dd>(.*?)</dd>", text, re.S)
    assert inputs and "pipeline_id" in inputs.group(1) and "Why did it fail?" in inputs.group(1)
    created = re.search(r'<dt>Created</dt><dd><time datetime="([^"]+)">([^<]+)</time>', text)
    assert created and re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", created.group(1)), created
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC", created.group(2))


def test_a_step_counts_its_model_calls_in_the_singular_and_plural(agents: AgentServer, ui: FlaskClient) -> None:
    text = run_to_the_action(ui, agents.create_task(pipeline_id=7, question="Why?"))
    assert "1 model call" in text and "1 model calls" not in text


def test_an_edit_decision_shows_the_arguments_it_ran_with(agents: AgentServer, ui: FlaskClient) -> None:
    task = agents.create_task(pipeline_id=7, question="Why?")
    form = run_to_the_action(ui, task)
    decided = ui.post(
        f"/ui/tasks/{task}/steps",
        data={"csrf_token": csrf(form), "decision": "edit", "arguments": '{"pipeline_id": 8}'},
    )
    assert decided.status_code == 302, decided.get_data(as_text=True)[:1000]
    text = page(ui, f"/ui/tasks/{task}")
    assert "pipeline 8 failed in its lint job." in text
    decision = re.search(r"<p>Decision: <strong>edit</strong>(.*?)</p>", text, re.S)
    assert decision and "{&#34;pipeline_id&#34;: 8}" in decision.group(1), text


@pytest.mark.parametrize(
    ("decision", "ran"),
    [("approve", "pipeline 7 failed in its lint job."), ("reject", "I did not look at the jobs, as asked.")],
)
def test_an_approve_or_reject_decision_never_shows_the_arguments_it_was_sent(
    agents: AgentServer, ui: FlaskClient, decision: str, ran: str
) -> None:
    task = agents.create_task(pipeline_id=7, question="Why?")
    run_to_the_action(ui, task)
    # The protocol takes ``arguments`` beside any decision, and ignores them unless it is an edit.
    additional = {"decision": decision, "arguments": {"pipeline_id": 99}, "reason": "do not read the jobs"}
    stepped = httpx.post(f"{agents.base}/ap/v1/agent/tasks/{task}/steps", json={"additional_input": additional})
    assert stepped.status_code == 200, stepped.text
    text = page(ui, f"/ui/tasks/{task}")
    assert ran in text
    shown = re.search(rf"<p>Decision: <strong>{decision}</strong>(.*?)</p>", text, re.S)
    assert shown and "arguments" not in shown.group(1) and "99" not in shown.group(1), text


def wait_for_status(agents: AgentServer, task: str, status: str) -> None:
    for _ in range(600):
        if httpx.get(f"{agents.base}/ap/v1/agent/tasks/{task}", timeout=30).json()["status"] == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"task {task} never became {status}")


REASON = "do not read the jobs"
"""What the triage agent's script answers a rejection for."""


def test_a_decision_on_a_background_task_is_shown_on_the_step_that_proposed_the_action(
    agents: AgentServer, ui: FlaskClient
) -> None:
    # A background task's next step is its worker's: it carries no decision of
    # its own, so the page says what was decided beside what was proposed.
    task = agents.create_task("background", pipeline_id=7, question="Why?")
    wait_for_status(agents, task, "waiting_for_input")
    form = page(ui, f"/ui/tasks/{task}")
    decided = ui.post(
        f"/ui/tasks/{task}/steps", data={"csrf_token": csrf(form), "decision": "reject", "reason": REASON}
    )
    assert decided.status_code == 302, decided.get_data(as_text=True)[:1000]
    wait_for_status(agents, task, "completed")
    text = page(ui, f"/ui/tasks/{task}")
    after_the_proposal = re.search(r"<p>Proposed: <code>list_jobs</code>.*?</p>\s*(<p[^>]*>.*?</p>)", text, re.S)
    assert after_the_proposal, text
    assert after_the_proposal.group(1) == f'<p class="decided">Decided: <strong>rejected</strong> ({REASON})</p>'
