"""What the commands log: the registry's own lines at REGISTRY_LOG_LEVEL,
the libraries' routine lines (a request made, a migration plugin loaded)
only at debug. Real processes: ``agents serve`` under gunicorn, ``run``
against a real OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.openai_server import ScriptedModelServer
from tests.support.ports import free_port
from tests.support.servers import clean_environment

CLI = str(Path(sys.executable).parent / "prompt-registry")
LIBRARY_LINES = ("alembic", "httpx", "HTTP Request", "setup plugin")


def _agents_serve_log(tmp_path: Path, level: str | None) -> str:
    """Start ``agents serve``, create a task and take one step, stop it; its stderr."""
    (tmp_path / "script.yml").write_text("- content: fine\n  repeat: true\n", encoding="utf-8")
    port = free_port()
    log = tmp_path / "stderr.log"
    environment = {**clean_environment(), **({"REGISTRY_LOG_LEVEL": level} if level else {})}
    command = [CLI, "agents", "serve", "--example", "--port", str(port), "--data-dir", str(tmp_path / "data")]
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*command, "--model", "scripted:script.yml"],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}/ap/v1/agent/tasks"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        body = json.dumps({"input": "q", "additional_input": {"agent": "support/draft_answer"}}).encode()
        created = urllib.request.Request(base, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(created, timeout=30) as response:
            task = json.loads(response.read())["task_id"]
        stepped = urllib.request.Request(f"{base}/{task}/steps", data=b"{}", method="POST")
        stepped.add_header("Content-Type", "application/json")
        urllib.request.urlopen(stepped, timeout=30).close()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    return log.read_text(encoding="utf-8")


def test_agents_serve_logs_its_own_lines_and_no_library_chatter(tmp_path: Path) -> None:
    log = _agents_serve_log(tmp_path, None)
    assert "INFO registry: Agent Protocol service:" in log
    assert not [line for line in log.splitlines() if any(noise in line for noise in LIBRARY_LINES)], log


def test_debug_brings_the_libraries_lines_back(tmp_path: Path) -> None:
    log = _agents_serve_log(tmp_path, "debug")
    assert "alembic" in log and "HTTP Request" in log


def test_run_against_a_model_server_logs_no_request_lines(tmp_path: Path) -> None:
    replies = [{"content": "Open Settings."}, {"content": '{"allow": true}'}]
    with ScriptedModelServer(replies, tmp_path) as server:
        result = subprocess.run(
            [CLI, "run", "support/gated_answer", "--example", "--input", "question=q", "--model", server.base_url],
            capture_output=True,
            text=True,
            timeout=120,
            env={**clean_environment(), "OPENAI_API_KEY": "sk-test"},
        )
    assert result.returncode == 0, result.stderr
    assert "outcome: completed" in result.stdout
    assert not [line for line in result.stderr.splitlines() if "HTTP Request" in line or "httpx" in line], result.stderr


@pytest.mark.parametrize("level", ["loud", "INFO ", "Warning"])
def test_the_log_level_is_checked(level: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [CLI, "lint", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_environment(), "REGISTRY_LOG_LEVEL": level},
    )
    if level.strip().lower() in ("info", "warning"):
        assert "log level" not in result.stderr
        return
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "prompt-registry: log level must be one of debug, info, warning, error"
