"""The Agent Protocol's published Python client, ``agent-protocol-client``
1.1.0 from PyPI, drives the service unmodified, over a real socket.

The client needs pydantic<2 and urllib3<2, which our venv cannot hold, so
it lives in a venv of its own (``.venv-apclient``, made once and reused)
and runs tests/support/ap_client_script.py, which prints what it saw as JSON.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server

from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import GATE_SCHEMA, GATED, json_leaf, leaf
from tests.support.protocol_service import Service

REPOSITORY = Path(__file__).resolve().parents[2]
CLIENT_VENV = REPOSITORY / ".venv-apclient"
CLIENT_NAME = "agent-protocol-client"
CLIENT_VERSION = "1.1.0"
CLIENT_PACKAGE = f"{CLIENT_NAME}=={CLIENT_VERSION}"
SCRIPT = Path(__file__).resolve().parents[1] / "support" / "ap_client_script.py"

REPLIES: list[dict[str, Any]] = [
    {"agent": "s/draft", "content": "Open Settings, then Account.", "repeat": True},
    {"agent": "s/gate", "content": '{"allow": true}', "repeat": True},
]


def _client_python() -> Path:
    return CLIENT_VENV / "bin" / "python"


def _client_works() -> bool:
    """Whether the client venv exists and imports the pinned client."""
    check = f"import importlib.metadata, agent_protocol_client; print(importlib.metadata.version({CLIENT_NAME!r}))"
    try:
        result = subprocess.run([str(_client_python()), "-c", check], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0 and result.stdout.strip() == CLIENT_VERSION


@pytest.fixture(scope="session")
def client_python() -> Path:
    """The interpreter of a venv holding the published client: made once, then reused."""
    if _client_works():
        return _client_python()
    shutil.rmtree(CLIENT_VENV, ignore_errors=True)  # half made, or another version: start again
    try:
        subprocess.run([sys.executable, "-m", "venv", str(CLIENT_VENV)], check=True, capture_output=True, timeout=120)
        subprocess.run(
            [str(_client_python()), "-m", "pip", "install", "-q", CLIENT_PACKAGE],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        said = getattr(exc, "stderr", None) or b""
        pytest.skip(
            f"cannot make a venv with {CLIENT_PACKAGE} at {CLIENT_VENV}: {exc}\n{said.decode(errors='replace')}"
        )
    if not _client_works():
        pytest.skip(f"{CLIENT_PACKAGE} was installed at {CLIENT_VENV}, but does not import")
    return _client_python()


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service over a library with a composite and a leaf, on a real socket."""
    root = tmp_path_factory.mktemp("protocol-client")
    library = LibraryRepo(root / "library").release(
        "v1.0.0",
        {
            "s/draft.yml": leaf("drafter", "Draft: {{ question }}", question="string"),
            "s/gate.yml": json_leaf("gate", "Check: {{ reply }}", GATE_SCHEMA, reply="string"),
            "s/gated.yml": GATED,
        },
    )
    service = Service(library, root / "data", REPLIES)
    server = make_server("127.0.0.1", 0, service.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        service.close()


@pytest.fixture(scope="module")
def seen(client_python: Path, base_url: str) -> dict[str, Any]:
    """What the published client saw, driving the service through the script (once for the module)."""
    result = subprocess.run(
        [str(client_python), str(SCRIPT), base_url], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_the_client_creates_a_task_with_its_agent_and_inputs(seen: dict[str, Any]) -> None:
    task = seen["task"]
    assert task["type"] == "Task" and task["task_id"] and task["artifacts"] == []
    assert task["input"] == "How do I change my e-mail address?"
    assert task["additional_input"]["agent"] == "s/gated"
    assert task["additional_input"]["inputs"] == {"question": "How do I change my e-mail address?"}


def test_the_client_executes_steps_of_a_composite_until_the_last(seen: dict[str, Any]) -> None:
    first, last = seen["steps"]
    task_id = seen["task"]["task_id"]
    assert {first["type"], last["type"]} == {"Step"}
    assert (first["task_id"], last["task_id"]) == (task_id, task_id)
    assert (first["is_last"], first["status"], first["output"]) == (False, "completed", "Open Settings, then Account.")
    assert (last["is_last"], last["status"], last["outcome"]) == (True, "completed", "completed")
    assert last["output"] == "Open Settings, then Account." and last["artifacts"] == ["answer.md"]


def test_the_client_pages_through_tasks_and_steps(seen: dict[str, Any]) -> None:
    tasks = seen["tasks_page"]
    assert tasks["task_ids"] == [seen["leaf_task_id"]]
    assert tasks["pagination"] == {"total_items": 2, "total_pages": 2, "current_page": 2, "page_size": 1}
    steps = seen["steps_page"]
    assert steps["step_ids"] == [seen["steps"][1]["step_id"]]
    assert steps["pagination"] == {"total_items": 2, "total_pages": 2, "current_page": 2, "page_size": 1}


def test_the_client_gets_a_task_and_a_step(seen: dict[str, Any]) -> None:
    assert seen["got_task"] == {"task_id": seen["task"]["task_id"], "artifacts": ["notes.bin", "answer.md"]}
    first = seen["steps"][0]
    assert seen["got_step"] == {"step_id": first["step_id"], "output": first["output"], "is_last": False}


def test_the_client_uploads_lists_and_downloads_an_artifact_byte_for_byte(seen: dict[str, Any]) -> None:
    uploaded = seen["uploaded"]
    assert uploaded["type"] == "Artifact" and uploaded["artifact_id"]
    assert (uploaded["agent_created"], uploaded["file_name"], uploaded["relative_path"]) == (
        False,
        "notes.bin",
        "docs/notes",
    )
    listed = seen["artifacts"]
    assert listed["artifacts"] == [
        {"file_name": "notes.bin", "agent_created": False, "relative_path": "docs/notes"},
        {"file_name": "answer.md", "agent_created": True, "relative_path": None},
    ]
    assert listed["pagination"] == {"total_items": 2, "total_pages": 1, "current_page": 1, "page_size": 10}
    assert seen["download"] == {"type": "bytes", "equal": True}


def test_an_unknown_task_reaches_the_client_as_an_api_exception_404(seen: dict[str, Any]) -> None:
    unknown = seen["unknown_task"]
    assert unknown["status"] == 404 and unknown["body"]["message"]
