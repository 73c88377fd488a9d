"""A real A2A server for the tests, as its own process:

    python -m tests.support.a2a_server --port N --repo PATH --data DIR --replies FILE [options]

It serves ``a2a_routes`` over the Agent Protocol service as ``agents
serve`` wires them (``create_asgi_app``: the Flask routes behind, so the
same tasks answer ``/ap/v1/agent/...`` and artifact links resolve, and one
event hub feeding the streams of both protocols), running agents of the
library at ``--repo`` with a scripted model and one tool, ``lookup``. ``A2AServer`` starts it on a free port and stops it by its PID.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette

from registry.a2a.routes import a2a_routes
from registry.client import RegistryClient
from registry.executor import Executor, PythonTools, ScriptedModel
from registry.protocol.app import create_app
from registry.protocol.asgi import create_asgi_app, event_hub
from registry.serving.app import create_app as create_registry_app
from registry.settings import Settings
from tests.support.ports import free_port
from tests.support.servers import REPOSITORY, RegistryProcess, clean_environment

LOOKUP_ANSWER = "{word} means something"


def build(options: argparse.Namespace) -> Starlette:
    registry = create_registry_app(Settings(repo=options.repo))
    client = RegistryClient("http://registry.test", transport=httpx.WSGITransport(app=registry), timeout=30)
    replies: list[dict[str, Any]] = json.loads(Path(options.replies).read_text(encoding="utf-8"))
    executor = Executor(
        model=ScriptedModel.from_replies(replies, source=options.replies),
        registry=client,
        tools=[PythonTools({"lookup": lambda word: LOOKUP_ANSWER.format(word=word)})],
        require_approval=options.require_approval,
    )
    settings = Settings(
        data_dir=options.data,
        api_tokens=tuple(options.api_token),
        agents_release=options.release,
        agents_max_artifact_bytes=options.max_artifact_bytes,
        agents_events_buffer=options.events_buffer,
    )
    protocol = create_app(settings, executor=executor, registry=client)
    service = protocol.extensions["agent_protocol.service"]
    hub = event_hub(protocol, settings)
    return create_asgi_app(protocol, settings, routes=a2a_routes(service, client, settings, hub=hub), hub=hub)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--replies", required=True)
    parser.add_argument("--release", default="latest")
    parser.add_argument("--require-approval", action="append", default=[])
    parser.add_argument("--api-token", action="append", default=[])
    parser.add_argument("--max-artifact-bytes", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--events-buffer", type=int, default=Settings.agents_events_buffer)
    options = parser.parse_args(argv)
    uvicorn.run(build(options), host="127.0.0.1", port=options.port, log_level="warning")


class A2AServer(RegistryProcess):
    """``python -m tests.support.a2a_server`` on a free port, answering ``replies``."""

    def __init__(self, repo: Path, data: Path, replies: list[dict[str, Any]], *options: str) -> None:
        data.mkdir(parents=True, exist_ok=True)
        script = data / "replies.json"
        script.write_text(json.dumps(replies), encoding="utf-8")
        port = free_port()
        module = [sys.executable, "-m", "tests.support.a2a_server", "--port", str(port)]
        paths = ["--repo", str(repo), "--data", str(data), "--replies", str(script)]
        super().__init__(command=[*module, *paths, *options], port=port, env=clean_environment(), cwd=REPOSITORY)


if __name__ == "__main__":
    main(sys.argv[1:])
