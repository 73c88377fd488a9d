"""Output parsing alike in the client, over HTTP and in the ``parse`` command
(the installed CLI in a subprocess), for agents of every output type."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from registry.client import RegistryClient
from registry.settings import Settings
from tests.conftest import LibraryRepo, make_app
from tests.support.parser_repos import agents_of_every_type
from tests.support.servers import CLI, clean_environment


@pytest.fixture
def agents_repo(repo: LibraryRepo) -> LibraryRepo:
    return agents_of_every_type(repo)


@pytest.mark.parametrize(
    ("agent", "reply"),
    [
        ("react_text", 'Thought: jobs first\nAction: list_jobs\nAction Input: {"pipeline_id": 7}'),
        ("react_text", "Action: job_log\nAction Input: not json"),
        ("react_text", "Thought: done\nFinal Answer: The cache key changed."),
        ("react_json", '```json\n{"thought": "t", "action": {"tool_name": "list_directory"}, "answer": null}\n```'),
        ("react_json", '{"thought": "t", "action": {"tool_name": "read_file", "tool_params": []}, "answer": null}'),
        (
            "react_json",
            '{"thought": "t", "action": {"tool_name": "read_file", "tool_params": [{"name": "path", "value": "\\ud800"}]},'
            ' "answer": null}',
        ),
        ("tools_triage", "Labels: bug, editor. Priority: P2."),
    ],
)
def test_client_http_and_cli_parse_alike(agents_repo: LibraryRepo, tmp_path: Path, agent: str, reply: str) -> None:
    app = make_app(Settings(repo=str(agents_repo.path)))
    try:
        client = RegistryClient("http://registry", release="v1.0.0", transport=httpx.WSGITransport(app=app))
        local = client.get("assistant", agent).parse(reply).as_dict()
        response = app.test_client().post(f"/v1/agents/assistant/{agent}/parse?release=v1.0.0", json={"output": reply})
        assert response.status_code == 200
        assert response.json is not None
        assert response.json["result"] == local
    finally:
        app.extensions["prompt_registry.service"].close()
    reply_file = tmp_path / "reply.txt"
    reply_file.write_text(reply, encoding="utf-8")
    command = [CLI, "parse", f"assistant/{agent}", "--output-file", str(reply_file), "--release", "v1.0.0"]
    result = subprocess.run(command, cwd=agents_repo.path, env=clean_environment(), capture_output=True, text=True)
    assert json.loads(result.stdout) == local
    assert result.returncode == (1 if local["kind"] == "parse_error" else 0)
