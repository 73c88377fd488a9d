"""The runtime against a real model server: llama.cpp's OpenAI-compatible
server serving SmolLM2-135M-Instruct, as ``bench/real_model_server.py``
builds it (docs/real-model.md).

Skipped, with the reason, unless ``REGISTRY_TEST_MODEL_URL`` names the
server's ``/v1`` base URL. The model is tiny: these tests check what the
runtime sends, records and counts, never the quality of an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from a2a.types import StreamResponse, TaskState

from registry.a2a.mapping import struct_plain
from registry.executor import COMPLETED, OUTCOMES, Executor, SqliteFtsRetriever
from registry.executor.events import TextEvent
from registry.providers import ChatRequest, OpenAIChatModel, RoutingChatModel, load_models_file
from tests.support.a2a_calls import data, sdk_client, user_message
from tests.support.agent_workers import fleet, wait_for_status
from tests.support.executor_fixtures import (
    LIBRARY_AGENTS,
    NO_SCHEMA_INPUTS,
    example_inputs,
    executor_for,
    library_tools,
    registry_client,
)
from tests.support.servers import CLI, clean_environment

MODEL_URL = os.environ.get("REGISTRY_TEST_MODEL_URL", "")
pytestmark = [
    pytest.mark.realmodel,
    pytest.mark.skipif(not MODEL_URL, reason="no real model server: set REGISTRY_TEST_MODEL_URL (docs/real-model.md)"),
]
REPOSITORY = Path(__file__).resolve().parents[2]

# What an operator writes to run the library on llama.cpp: every provider a
# definition names, routed to the local server under the model's name.
MODELS_FILE = """\
providers:
  local: {{kind: openai_compatible, base_url: "{url}", server: llama.cpp, timeout: 300, max_retries: 0}}
routes:
  - match: {{name: "*"}}
    use: {{provider: local, name: smollm2}}
default: local
"""


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("realmodel") / "models.yml"
    path.write_text(MODELS_FILE.format(url=MODEL_URL), encoding="utf-8")
    return path


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``prompt-registry run`` from the repository's root, as docs/executor.md shows it."""
    return subprocess.run(
        [CLI, "run", *args, "--example"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPOSITORY,
        env={**clean_environment(), "OPENAI_API_KEY": "sk-local"},
    )


def _spans(span: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    own = [span] if span["name"].startswith(prefix) else []
    return own + [found for child in span.get("children", []) for found in _spans(child, prefix)]


def _server_errors(text: str) -> bool:
    """Whether a run's error is the server refusing what it was sent (what
    llama.cpp's quirks used to cause), or going away (a schema whose grammar
    it could not build once crashed it), rather than the model's reply."""
    markers = ("status 500", "status 400", "status 422", "Internal Server Error", "connection to the model endpoint")
    return any(marker in text for marker in markers)


def test_a_library_agent_runs_and_its_trace_names_the_model_asked_and_the_model_that_answered() -> None:
    # The library's shortest answer (60 tokens, a newline stop), so that a
    # slow CPU still answers within the definition's 15 s.
    result = _run(
        "commit_message/one_line",
        "--input",
        "diff=-a = 1\n+a = 2",
        "--model",
        MODEL_URL,
        "--model-map",
        "qwen2.5-coder:7b-instruct=smollm2",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    answer = json.loads(result.stdout)
    assert (answer["outcome"], answer["llm_calls"], answer["llm_replies"]) == ("completed", 1, 1)
    assert answer["output"] and answer["usage"]["output_tokens"] > 0
    [chat] = _spans(answer["trace"], "chat ")
    assert chat["attributes"]["gen_ai.request.model"] == "smollm2"
    assert isinstance(chat["attributes"]["gen_ai.response.model"], str) and chat["attributes"]["gen_ai.response.model"]
    assert "HTTP Request" not in result.stderr


def test_a_model_map_that_matches_nothing_is_named_on_stderr() -> None:
    result = _run(
        "commit_message/one_line", "--input", "diff=+a = 2", "--model", MODEL_URL, "--model-map", "gpt-4o=smollm2"
    )
    assert result.returncode == 0, result.stderr
    assert "model map gpt-4o=smollm2" in result.stderr and "matched no model" in result.stderr


def _routed(models_file: Path) -> RoutingChatModel:
    """The models file's router; the executor given it closes it."""
    return RoutingChatModel(load_models_file(models_file), environ={})


@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_ends_in_a_named_outcome_through_the_models_file(
    example: Path,
    docs_index: SqliteFtsRetriever,
    models_file: Path,
    agent: str,
    record_property: Callable[[str, object], None],
) -> None:
    # A tiny model fails parsers often: what must hold is that every run ends
    # in one of the four outcomes, counted and explained, never an exception,
    # and never because the server refused what the runtime sent it.
    unnamed = {"model_name": "smollm2"} if agent in NO_SCHEMA_INPUTS else {}
    with executor_for(
        example, _routed(models_file), tools=[library_tools()], retrievers={"product-docs": docs_index}, **unnamed
    ) as executor:
        result = executor.run(agent, example_inputs(agent))
    # For docs/executor.md's "Tested with" table: pytest --junitxml keeps them.
    record_property("outcome", result.outcome)
    record_property("llm_calls", result.llm_calls)
    record_property("error", result.error or "")
    trace = result.trace.as_text()
    assert result.outcome in OUTCOMES
    assert result.llm_calls >= 1 and result.llm_calls >= result.llm_replies, trace
    if result.outcome == COMPLETED:
        assert result.output, trace
    else:
        assert result.error and "internal" not in result.error, trace
        assert not _server_errors(result.error), trace


def test_the_seeds_chat_minimal_runs_as_a_react_agent_with_its_tools(models_file: Path) -> None:
    result = _run(
        "chat/minimal",
        "--models",
        str(models_file),
        "--tools",
        "library.tools.duo_chat:TOOLS",
        "--input",
        "question=What is a merge train?",
        "--format",
        "json",
    )
    answer = json.loads(result.stdout)
    assert answer["outcome"] in OUTCOMES, result.stderr
    assert not _server_errors(answer.get("error") or ""), answer["error"]
    chats = _spans(answer["trace"], "chat ")
    assert len(chats) == answer["llm_calls"] >= 1
    for chat in chats:
        assert chat["attributes"]["registry.provider.kind"] == "openai_compatible"
        assert chat["attributes"]["registry.model.sent"] == "smollm2"
    # The input fills {question}; the executor fills {agent_scratchpad} every
    # round, so no request carries either placeholder as text.
    [leaf] = _spans(answer["trace"], "invoke_agent chat/minimal")
    assert leaf["attributes"]["registry.placeholders"] == ["agent_scratchpad"]
    sent = json.dumps([chat["attributes"].get("registry.input_messages") for chat in chats])
    assert "What is a merge train?" in sent
    assert "{question}" not in sent and "{agent_scratchpad}" not in sent


def test_run_stream_prints_text_events_before_the_outcome(models_file: Path) -> None:
    # The library's shortest answer, so that a slow CPU streams it within
    # the definition's 15 s.
    result = _run(
        "commit_message/one_line",
        "--models",
        str(models_file),
        "--input",
        "diff=-a = 1\n+a = 2",
        "--stream",
        "--format",
        "jsonl",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "outcome" and "text" in kinds, kinds
    assert kinds.index("text") < kinds.index("span")
    streamed = "".join(event["text"] for event in events if event["type"] == "text")
    assert streamed == events[-1]["output"]


def test_a_cancelled_stream_leaves_the_server_free_for_the_next_call(example: Path, models_file: Path) -> None:
    # Cancelled after its first words, a long answer must not keep llama.cpp
    # generating: the next call is answered within its own timeout (30 s,
    # while a server still busy would make it wait minutes).
    async def cancel_after_first_text(client: Any) -> list[str]:
        inputs = {"question": "Write a very long essay on the history of version control, in detail."}
        seen: list[str] = []
        async with Executor(model=_routed(models_file), registry=client) as executor:
            stream = executor.astream("support/draft_answer", inputs)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    seen.append(event.type)
                    if isinstance(event, TextEvent):
                        break
        return seen

    with registry_client(example) as client:
        assert asyncio.run(cancel_after_first_text(client)) == ["text"]
    request = ChatRequest(
        model="smollm2", messages=({"role": "user", "content": "Say hi."},), params={"max_tokens": 8}, timeout=30
    )

    async def say_hi() -> str | None:
        # Closed on the loop it used: left open, its connection was collected
        # during a later test, as an unclosed transport.
        fresh = OpenAIChatModel(base_url=MODEL_URL, api_key="sk-local", server="llama.cpp", max_retries=0)
        try:
            return (await fresh.complete(request)).content
        finally:
            await fresh.aclose()

    assert asyncio.run(say_hi()) is not None


def _statuses(report: Path) -> dict[str, tuple[str | None, str | None]]:
    """Each case of an ``eval --format json`` report: its status on base and on head."""
    found = json.loads(report.read_text(encoding="utf-8"))
    return {
        f"{dataset['agent']}:{case['id']}": tuple(  # type: ignore[misc]
            (case[side] or {}).get("status") for side in ("base", "head")
        )
        for dataset in found["datasets"]
        for case in dataset["cases"]
    }


def test_an_evaluation_of_two_releases_on_the_real_model_replays_to_the_same_verdicts(
    models_file: Path, tmp_path: Path
) -> None:
    """``eval`` of the example's classifier (changed between the releases)
    and the route that runs it: every case ends passed, failed or error, no
    error is the server's, and the exchanges recorded replay, with no
    model, to the same verdict for every case."""
    recording, live, replayed = tmp_path / "exchanges.yml", tmp_path / "live.json", tmp_path / "replayed.json"
    common = ["eval", "--example", "--base", "v1.0.0", "--head", "v1.1.0", "support/classify_request"]
    common += ["support/routed_answer", "--format", "json"]
    environment = {**clean_environment(), "OPENAI_API_KEY": "sk-local"}
    first = subprocess.run(
        [CLI, *common, "-o", str(live), "--models", str(models_file), "--concurrency", "2", "--record", str(recording)],
        capture_output=True, text=True, timeout=1800, cwd=REPOSITORY, env=environment,
    )  # fmt: skip
    assert first.returncode in (0, 1), first.stderr
    verdicts = _statuses(live)
    assert len(verdicts) >= 8 and {status for pair in verdicts.values() for status in pair} <= {
        "passed", "failed", "error"
    }  # fmt: skip
    for dataset in json.loads(live.read_text(encoding="utf-8"))["datasets"]:
        for case in dataset["cases"]:
            for run in [run for side in ("base", "head") for run in (case[side] or {}).get("runs", [])]:
                assert not _server_errors(run["error"] or ""), run["error"]
    again = subprocess.run(
        [CLI, *common, "-o", str(replayed), "--replay", str(recording)],
        capture_output=True, text=True, timeout=300, cwd=REPOSITORY, env=clean_environment(),
    )  # fmt: skip
    assert again.returncode == first.returncode, again.stderr
    assert _statuses(replayed) == verdicts


def test_a_background_task_sent_over_a2a_streams_the_real_models_answer_as_it_comes(
    models_file: Path, tmp_path: Path
) -> None:
    """``agents serve`` with its own DBOS worker, the SDK's streaming client:
    the task runs in the background on llama.cpp, its answer arrives as text
    events before the stored answer and the end, and the Agent Protocol
    shows the same task and answer."""
    environment = {"OPENAI_API_KEY": "sk-local"}
    with fleet(tmp_path / "logs", cwd=REPOSITORY, env=environment) as made:
        server = made.server("--example", "--models", str(models_file), "--data-dir", str(tmp_path / "data"))
        made.start(server)
        request = user_message(data({"diff": "-a = 1\n+a = 2"}))

        async def send() -> list[StreamResponse]:
            url = f"{server.base}/a2a/agents/commit_message/one_line"
            async with sdk_client(url, streaming=True) as client:
                return [event async for event in client.send_message(request)]

        streamed = asyncio.run(send())
        first, *rest = streamed
        task_id = first.task.id
        done = wait_for_status(server.base, task_id, ("completed", "failed"), timeout=600)
    assert not _server_errors(str(done.get("error"))), done
    assert rest[-1].status_update.status.state in (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED)
    if done["status"] == "completed":
        texts = [e.status_update.status for e in rest if struct_plain(e.status_update.metadata).get("kind") == "text"]
        assert "".join(part.text for status in texts for part in status.message.parts) == done["output"]
        [stored] = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
        assert (stored.name, stored.parts[0].text) == ("answer.md", done["output"])
        at_stored = next(i for i, e in enumerate(rest) if e.HasField("artifact_update"))
        assert all(
            rest.index(e) < at_stored for e in rest if struct_plain(e.status_update.metadata).get("kind") == "text"
        )
