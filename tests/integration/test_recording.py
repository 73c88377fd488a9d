"""Recording runs of library agents through a real OpenAI-compatible HTTP
server (its own process, reached with the official SDK), then replaying
them with no server at all: the same outcome and output, each reply
marked as replayed; whole runs and streamed ones; concurrent cases
recorded twice into the same bytes; a replay asked for what it lacks, or
given a file edited into invalid YAML, says what and where."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ConfigurationError
from registry.executor import Executor, OpenAIChatModel, ScriptedModel, SqliteFtsRetriever
from registry.executor.events import OutcomeEvent
from registry.executor.executor import RunResult
from registry.providers.chat import ChatModel
from registry.providers.recording import RecordingChatModel, ReplayChatModel, exchange_label
from tests.support.executor_fixtures import (
    NO_SCHEMA_INPUTS,
    example_inputs,
    executor_for,
    library_tools,
    registry_client,
    run_scripted,
)
from tests.support.openai_server import REPOSITORY, ScriptedModelServer
from tests.support.servers import RegistryProcess

# A leaf with native tool calls, a ReAct leaf, a json leaf, and composites:
# a route, a chain gated by a response gate, an evaluator-optimizer loop.
AGENTS = [
    "assistant/tools_triage",
    "assistant/react_text",
    "support/classify_request",
    "support/routed_answer",
    "support/gated_answer",
    "code_writing/reviewed_function",
]
# A leaf whose answer streams when the run is streamed.
STREAMED = "commit_message/one_line"


def _server_replies(result: RunResult) -> list[dict[str, Any]]:
    """The replies a run got, in the order asked, as the scripted server's script."""
    replies = []
    for chat in sorted(result.trace.spans("chat"), key=lambda span: span.started):
        reply = chat.attributes["registry.reply"]
        calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in reply.get("tool_calls", [])]
        replies.append(
            {"tool_calls": calls, "content": reply["content"] or None} if calls else {"content": reply["content"]}
        )
    return replies


async def _run_case(
    example: Path,
    docs_index: SqliteFtsRetriever,
    model: ChatModel,
    agent: str,
    case: str,
    *,
    stream: bool = False,
    close: bool = True,
) -> RunResult:
    """``agent`` run for the eval case ``case``, as the eval runner runs one;
    the executor closes ``model`` after unless not ``close``."""
    token = exchange_label.set(case)
    try:
        with registry_client(example) as client:
            executor = Executor(
                model=model,
                registry=client,
                tools=[library_tools()],
                retrievers={"product-docs": docs_index},
                # An agent that names no model runs on the one the operator names.
                model_name="served-model" if agent in NO_SCHEMA_INPUTS else None,
            )
            try:
                if not stream:
                    return await executor.arun(agent, example_inputs(agent))
                events = [event async for event in executor.astream(agent, example_inputs(agent))]
                outcome = events[-1]
                assert isinstance(outcome, OutcomeEvent)
                return outcome.result
            finally:
                if close:
                    await executor.aclose()
    finally:
        exchange_label.reset(token)


def _record(
    example: Path, docs_index: SqliteFtsRetriever, agent: str, path: Path, tmp_path: Path, *, stream: bool = False
) -> RunResult:
    replies = _server_replies(run_scripted(example, docs_index, agent))
    with ScriptedModelServer(replies, tmp_path) as server:
        live = OpenAIChatModel(base_url=server.base_url, api_key="test-key", max_retries=0)
        recorder = RecordingChatModel(live, path)
        # Closing the executor closes the recorder, which writes the file.
        return asyncio.run(_run_case(example, docs_index, recorder, agent, f"{agent} example", stream=stream))


@pytest.mark.parametrize("agent", AGENTS)
def test_a_run_recorded_through_a_real_server_replays_the_same_with_no_server(
    example: Path, docs_index: SqliteFtsRetriever, agent: str, tmp_path: Path
) -> None:
    path = tmp_path / "replay.yml"
    recorded = _record(example, docs_index, agent, path, tmp_path)
    assert recorded.completed, recorded.error
    replay = ReplayChatModel(path)
    replayed = asyncio.run(_run_case(example, docs_index, replay, agent, f"{agent} example"))
    assert (replayed.outcome, replayed.output, replayed.data) == (recorded.outcome, recorded.output, recorded.data)
    assert (replayed.llm_calls, replayed.usage) == (recorded.llm_calls, recorded.usage)
    origins = {span.attributes["registry.reply"].get("origin") for span in replayed.trace.spans("chat")}
    assert origins == {"replay"}
    assert sum(len(exchange.replies) for exchange in replay.exchanges) == recorded.llm_calls


def test_a_streamed_run_is_recorded_and_replayed_as_a_stream(
    example: Path, docs_index: SqliteFtsRetriever, tmp_path: Path
) -> None:
    path = tmp_path / "replay.yml"
    recorded = _record(example, docs_index, STREAMED, path, tmp_path, stream=True)
    assert recorded.completed, recorded.error
    replayed = asyncio.run(
        _run_case(example, docs_index, ReplayChatModel(path), STREAMED, f"{STREAMED} example", stream=True)
    )
    assert (replayed.outcome, replayed.output) == (recorded.outcome, recorded.output)


def test_a_case_label_set_before_a_synchronous_run_reaches_the_model(example: Path, tmp_path: Path) -> None:
    # Executor.run runs on a loop of its own, in another thread: the label set here goes with the call.
    path = tmp_path / "replay.yml"
    recorder = RecordingChatModel(ScriptedModel.from_replies([{"content": '{"label": "billing"}'}], source="t"), path)
    token = exchange_label.set("sync case")
    try:
        with executor_for(example, recorder) as executor:
            assert executor.run("support/classify_request", example_inputs("support/classify_request")).completed
    finally:
        exchange_label.reset(token)
    assert [exchange.case for exchange in ReplayChatModel(path).exchanges] == ["sync case"]


def test_a_request_the_replay_lacks_fails_the_run_naming_the_case(
    example: Path, docs_index: SqliteFtsRetriever, tmp_path: Path
) -> None:
    agent = "support/classify_request"
    path = tmp_path / "replay.yml"
    _record(example, docs_index, agent, path, tmp_path)
    # The case's input, edited in the file where the run will not send it.
    text = path.read_text()
    edited = text.replace("I was charged twice", "I was charged three times", 1)
    assert edited != text
    path.write_text(edited)
    result = asyncio.run(_run_case(example, docs_index, ReplayChatModel(path), agent, f"{agent} example"))
    assert result.outcome == "failed"
    assert result.error is not None and "\n" not in result.error
    assert f"no recorded reply for case '{agent} example' (agent {agent})" in result.error
    assert "the messages differ at message 2 (user): recorded ...' charged three times" in result.error


def test_a_replay_file_edited_into_invalid_yaml_is_refused_with_its_line(
    example: Path, docs_index: SqliteFtsRetriever, tmp_path: Path
) -> None:
    path = tmp_path / "replay.yml"
    _record(example, docs_index, "support/classify_request", path, tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    broken = next(index for index, line in enumerate(lines) if line.lstrip().startswith("- content:"))
    lines[broken] = lines[broken].replace("- content:", "- content: [", 1)
    path.write_text("".join(lines))
    with pytest.raises(ConfigurationError) as raised:
        ReplayChatModel(path)
    assert str(raised.value).startswith(f"{path}:")
    assert raised.value.errors[0].line is not None and raised.value.errors[0].line >= broken + 1


def test_concurrent_cases_recorded_twice_write_the_same_file(
    example: Path, docs_index: SqliteFtsRetriever, tmp_path: Path
) -> None:
    # Each reply answers the requests whose last message it matches, whatever
    # order the cases call in; the server numbers its tool calls' ids in that order.
    script = [
        {"when": '"tool": "search_issues"', "content": "Duplicate of #12.", "repeat": True},
        {"when": "charged twice", "content": '{"label": "billing"}', "repeat": True},
        {"tool_calls": [{"name": "search_issues", "arguments": {"query": "crash on start"}}], "repeat": True},
    ]
    cases = [
        (agent, f"{agent} {n}") for n in range(3) for agent in ("assistant/tools_triage", "support/classify_request")
    ]

    async def record(path: Path, server: ScriptedModelServer, order: list[tuple[str, str]]) -> list[RunResult]:
        recorder = RecordingChatModel(OpenAIChatModel(base_url=server.base_url, api_key="k", max_retries=0), path)
        try:
            return await asyncio.gather(
                *(_run_case(example, docs_index, recorder, agent, case, close=False) for agent, case in order)
            )
        finally:
            await recorder.aclose()

    for name, order in (("first", cases), ("second", list(reversed(cases)))):
        (tmp_path / name).mkdir()
        with ScriptedModelServer(script, tmp_path / name) as server:
            results = asyncio.run(record(tmp_path / f"{name}.yml", server, order))
        assert all(result.completed for result in results), [result.error for result in results]
    first = (tmp_path / "first.yml").read_bytes()
    assert first == (tmp_path / "second.yml").read_bytes()
    assert first.count(b"- case: ") == 9  # three of classify_request, six of tools_triage (two calls each)


def test_the_python_example_of_the_recording_docs_runs_and_writes_the_file_shown(tmp_path: Path) -> None:
    page = (REPOSITORY / "docs" / "executor.md").read_text(encoding="utf-8")
    section = page[page.index("## Recording and replaying model exchanges") :]
    code = _block(section, "```python\n")
    shown = _block(section[section.index("### The file") :], "```yaml\n")
    with RegistryProcess("--example") as registry:
        script = tmp_path / "example.py"
        script.write_text(code.replace("http://127.0.0.1:8080", registry.base), encoding="utf-8")
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["completed {'label': 'billing'}", "replay"]
    assert (tmp_path / "replay.yml").read_text(encoding="utf-8") == shown


def _block(text: str, opening: str) -> str:
    """The first fenced block of ``text`` that opens with ``opening``."""
    start = text.index(opening) + len(opening)
    return text[start : text.index("```", start)]
