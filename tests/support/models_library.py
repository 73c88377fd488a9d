"""A library whose agents name different providers (``model.provider``),
the servers that play those providers, and the models files binding them:
shared by the tests of ``--models`` for ``run`` and ``agents serve``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tests.support.executor_fixtures import GATE_SCHEMA, GATED, json_leaf, leaf
from tests.support.openai_server import ScriptedModelServer
from tests.support.ports import free_port
from tests.support.servers import CLI, clean_environment


def _naming(definition: str, model: str, provider: str | None) -> str:
    """``definition`` (a leaf of executor_fixtures) naming ``model`` and ``provider``."""
    named = f"{{name: {model}, provider: {provider}," if provider else f"{{name: {model},"
    return definition.replace("{name: test-model,", named)


DRAFT = _naming(leaf("the drafter", "Draft a reply to: {{ question }}", question="string"), "draft-model", "vllm")
GATE = _naming(
    json_leaf("the gate", "Check this reply: {{ reply }}", GATE_SCHEMA, reply="string"),
    "claude-3-5-haiku-20241022",
    "anthropic",
)


def single(model: str, provider: str | None) -> str:
    """A vanilla leaf asking ``question`` of ``model`` at ``provider``."""
    return _naming(leaf("a single call", "{{ question }}", question="string"), model, provider)


LIBRARY = {
    # A chain whose members name two providers: s/draft (vllm), s/gate (anthropic).
    "s/draft.yml": DRAFT,
    "s/gate.yml": GATE,
    "s/gated.yml": GATED,
    "s/ollama.yml": single("llama3", "ollama"),
    "s/plain.yml": single("gpt-4o-mini", None),
    "s/openai.yml": single("gpt-4o", "openai"),
    "s/claude.yml": single("claude-3-5-sonnet-20241022", "anthropic"),
}

_DROPPED = ("OPENAI_", "ANTHROPIC_", "AZURE_", "REGISTRY_")


def environment(**variables: str) -> dict[str, str]:
    """The test's environment without any model provider's or registry's
    settings, plus ``variables``."""
    return {**{k: v for k, v in clean_environment().items() if not k.startswith(_DROPPED)}, **variables}


def prompt_registry(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command, as a user runs it."""
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env or environment())


@contextmanager
def model_servers(directory: Path, **replies: list[dict[str, Any]]) -> Iterator[dict[str, ScriptedModelServer]]:
    """One scripted OpenAI-compatible server per keyword, each on a free port, all at once."""
    with ExitStack() as stack:
        servers = {}
        for name, script in replies.items():
            folder = directory / f"server-{name}"
            os.makedirs(folder, exist_ok=True)
            servers[name] = stack.enter_context(ScriptedModelServer(script, folder))
        yield servers


def trace_spans(trace: dict[str, Any], operation: str) -> list[dict[str, Any]]:
    """Every span of ``operation`` in a run's trace, in order."""
    found = [trace] if trace.get("operation") == operation else []
    for child in trace.get("children", []):
        found += trace_spans(child, operation)
    return found


@contextmanager
def agents_serve(*args: str, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """``prompt-registry agents serve`` on a free port until the block ends; its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [CLI, "agents", "serve", "--port", str(port), "--data-dir", "data", *args],
        cwd=cwd,
        env=env,
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
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def post(base: str, path: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as JSON; the JSON answer (the status must be 200)."""
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())
