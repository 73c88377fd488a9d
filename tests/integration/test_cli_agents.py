"""``prompt-registry agents serve`` as its users run it: a real gunicorn
process over a real database, and a registry that goes away in the middle
of a task (workers killed mid-step: test_runs_reliability)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from registry.store.example import build_example_repository
from tests.support.agent_workers import call
from tests.support.ports import free_port
from tests.support.servers import REPOSITORY, RegistryProcess, clean_environment

CLI = str(Path(sys.executable).parent / "prompt-registry")


@contextmanager
def agents_serve(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``agents serve`` on a free port, in a process group of its own, until the block ends."""
    port = free_port()
    process = subprocess.Popen(
        [CLI, "agents", "serve", "--port", str(port), *args],
        cwd=cwd,
        env={**clean_environment(), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "agents serve did not start"
                time.sleep(0.1)
        yield base
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def kill_group(base: str) -> None:
    """SIGKILL every process of the server listening at ``base`` (master and workers)."""
    import psutil

    port = int(base.rsplit(":", 1)[1])
    for connection in psutil.net_connections(kind="tcp"):
        if (
            connection.laddr
            and connection.laddr.port == port
            and connection.status == psutil.CONN_LISTEN
            and connection.pid
        ):
            os.killpg(os.getpgid(connection.pid), signal.SIGKILL)
            return
    raise AssertionError("no process listens at " + base)


def test_a_task_goes_on_from_the_client_cache_when_the_registry_goes_away(tmp_path: Path) -> None:
    (tmp_path / "script.yml").write_text(
        "- {agent: support/draft_answer, content: 'Open Settings, then Profile.'}\n"
        "- {agent: compliance/response_gate, content: '{\"allow\": true}'}\n",
        encoding="utf-8",
    )
    with RegistryProcess("--example") as registry:
        with agents_serve(
            "--registry", registry.base, "--model", "scripted:script.yml", "--data-dir", "data", cwd=tmp_path
        ) as base:
            status, task = call(base, "POST", "/ap/v1/agent/tasks", {
                "input": "How do I change my e-mail address?", "additional_input": {"agent": "support/gated_answer"}
            })  # fmt: skip
            assert status == 200, task
            status, first = call(base, "POST", f"/ap/v1/agent/tasks/{task['task_id']}/steps", {})
            assert (status, first["is_last"]) == (200, False)
            registry.stop()
            status, last = call(base, "POST", f"/ap/v1/agent/tasks/{task['task_id']}/steps", {})
    assert status == 200, last
    assert (last["is_last"], last["additional_output"]["outcome"]) == (True, "completed")
    assert last["additional_output"]["release"]["tag"] == "v1.1.0"


def _ignore_errors(function: Any, *args: Any) -> None:
    try:
        function(*args)
    except OSError:
        pass  # the server was killed under it, as the test means it to be


def test_bad_options_of_agents_serve_exit_2_with_one_line(tmp_path: Path) -> None:
    for arguments, message in [
        (["--database-url", "mysql://u:secret@h/db"], "the agents database URL must be"),
        (["--model", "scripted:missing.yml"], "missing.yml does not exist"),
        (["--registry", "ftp://x"], "expected an http(s) URL"),
        (["--allow-push-to", "10.1.0.0/16", "--allow-push-to", "hooks.internal"], "is not a network"),
    ]:
        result = subprocess.run(
            [CLI, "agents", "serve", "--example", "--port", str(free_port()), "--data-dir", "d", *arguments],
            cwd=tmp_path,
            env=clean_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = [line for line in result.stderr.splitlines() if line.startswith("prompt-registry:")]
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
        assert "Traceback" not in result.stderr and "secret" not in result.stderr


TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
GATED_REPLIES = (
    "- {agent: support/draft_answer, content: 'Open Settings, then Profile.', repeat: true}\n"
    "- {agent: compliance/response_gate, content: '{\"allow\": true}', repeat: true}\n"
)


def test_with_tokens_set_agents_serve_runs_a_local_library_and_each_token_sees_only_its_tasks(
    tmp_path: Path,
) -> None:
    (tmp_path / "script.yml").write_text(GATED_REPLIES, encoding="utf-8")
    repository = build_example_repository(tmp_path / "library")
    options = ("--repo", str(repository), "--model", "scripted:script.yml", "--data-dir", "data")
    tokens = {"REGISTRY_API_TOKENS": f"{TOKEN_A},{TOKEN_B}"}
    create = {"input": "How do I change my e-mail address?", "additional_input": {"agent": "support/gated_answer"}}
    with agents_serve(*options, cwd=tmp_path, env=tokens) as base:
        status, refused = call(base, "POST", "/ap/v1/agent/tasks", create)
        assert (status, refused["type"]) == (401, "/problems/unauthorized")
        status, task = call(base, "POST", "/ap/v1/agent/tasks", create, token=TOKEN_A)
        assert status == 200, task
        steps = f"/ap/v1/agent/tasks/{task['task_id']}/steps"
        status, hidden = call(base, "POST", steps, {}, token=TOKEN_B)
        assert (status, hidden["type"]) == (404, "/problems/task-not-found")
        assert call(base, "GET", "/ap/v1/agent/tasks", token=TOKEN_B)[1]["tasks"] == []
        status, theirs = call(base, "POST", "/ap/v1/agent/tasks", create, token=TOKEN_B)
        assert status == 200, theirs
        while True:
            status, step = call(base, "POST", steps, {}, token=TOKEN_A)
            assert status == 200 and step["additional_output"]["state"] == "completed", step
            if step["is_last"]:
                break
        assert step["additional_output"]["outcome"] == "completed"
        listed = call(base, "GET", "/ap/v1/agent/tasks", token=TOKEN_A)[1]["tasks"]
        assert [t["task_id"] for t in listed] == [task["task_id"]]


def test_with_tokens_set_run_fetches_from_a_local_library_without_one(tmp_path: Path) -> None:
    (tmp_path / "script.yml").write_text(GATED_REPLIES, encoding="utf-8")
    repository = build_example_repository(tmp_path / "library")
    result = subprocess.run(
        [CLI, "run", "support/gated_answer", "--repo", str(repository), "--input", "question=How?"]
        + ["--model", "scripted:script.yml"],
        cwd=tmp_path,
        env={**clean_environment(), "REGISTRY_API_TOKENS": TOKEN_A, "REGISTRY_ADMIN_TOKENS": TOKEN_B},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "outcome: completed" in result.stdout


DOCS = REPOSITORY / "docs" / "agent-protocol.md"
_SHOWN_OUTPUT = re.compile(r'"output": ("(?:[^"\\]|\\.)*")')
_SHOWN_IS_LAST = re.compile(r'"is_last": (true|false)')


def documented_session(heading: str) -> list[tuple[list[str], str]]:
    """The commands of the console block after ``heading`` in the docs, each
    split as a shell splits it, with the answer shown under it."""
    text = DOCS.read_text(encoding="utf-8")
    block = text[text.index(heading) :].split("```console\n", 1)[1].split("\n```", 1)[0]
    session: list[tuple[list[str], str]] = []
    pending = ""
    for line in block.splitlines():
        if pending or line.startswith("$ "):
            pending = f"{pending}\n{line}" if pending else line[2:]
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            try:
                words = shlex.split(pending, comments=True)
            except ValueError:  # a quotation still open: the command goes on
                continue
            session.append((words, ""))
            pending = ""
        elif session:
            session[-1] = (session[-1][0], session[-1][1] + line + "\n")
    return session


def test_the_approval_example_of_the_docs_runs_as_written(tmp_path: Path) -> None:
    session = documented_session("A worked example: `assistant/react_text`")
    serve, *requests = session
    assert serve[0][:3] == ["prompt-registry", "agents", "serve"]
    task_id = "d1b8668e-..."
    with agents_serve(*serve[0][3:], "--data-dir", str(tmp_path / "data"), cwd=REPOSITORY) as base:
        for command, shown in requests:
            assert command[:2] == ["curl", "-s"], command
            url = next(arg for arg in command if arg.startswith("localhost:8090/"))
            data = command[command.index("-d") + 1] if "-d" in command else None
            method = "POST" if data is not None or "POST" in command else "GET"
            path = url.removeprefix("localhost:8090").replace("d1b8668e-...", task_id)
            status, answer = call(base, method, path, json.loads(data) if data else ({} if method == "POST" else None))
            assert status == 200, (command, answer)
            task_id = answer.get("task_id", task_id)
            for flag in _SHOWN_IS_LAST.findall(shown):
                assert answer["is_last"] is (flag == "true")
            for literal in _SHOWN_OUTPUT.findall(shown):
                output = json.loads(literal)
                assert answer["output"].startswith(output.removesuffix("...")), (output, answer["output"])
            if "actions" in answer:
                [action] = answer["actions"]
                assert (action["status"], action["edited_arguments"]) == ("edited", {"job_id": 88, "lines": 50})
    assert [len(requests), answer["actions"][0]["arguments"]] == [5, {"job_id": 88, "lines": 500}]
