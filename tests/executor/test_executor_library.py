"""Every agent of the bundled library runs end to end: with the scripted
model, then through a real OpenAI-compatible HTTP server with the official
SDK, where the same replies in the same order must give the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.executor import COMPLETED, OpenAIChatModel, SqliteFtsRetriever
from registry.executor.executor import RunResult
from tests.support.executor_fixtures import (
    LIBRARY_AGENTS,
    NO_SCHEMA_INPUTS,
    example_inputs,
    executor_for,
    library_tools,
    scripted_replies,
)
from tests.support.openai_server import ScriptedModelServer


def run_scripted(example: Path, docs_index: SqliteFtsRetriever, agent: str) -> RunResult:
    with executor_for(
        example, scripted_replies(), tools=[library_tools()], retrievers={"product-docs": docs_index}
    ) as executor:
        return executor.run(agent, example_inputs(agent))


@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_completes_with_the_scripted_model(
    example: Path, docs_index: SqliteFtsRetriever, agent: str
) -> None:
    result = run_scripted(example, docs_index, agent)
    assert result.outcome == COMPLETED, result.trace.as_text()
    assert result.release.release.tag == "v1.1.0"
    assert result.output
    assert result.llm_calls >= 1


def test_the_rag_agent_passes_retrieved_passages_to_its_prompt(example: Path, docs_index: SqliteFtsRetriever) -> None:
    result = run_scripted(example, docs_index, "assistant/docs_rag")
    [retrieve] = result.trace.spans("retrieve")
    assert retrieve.attributes["registry.query"] == "How do I rotate a deploy token?"
    system = result.trace.spans("chat")[0].attributes["registry.input_messages"][0]["content"]
    assert "[1] Deploy tokens › Rotating a token" in system


def test_a_react_json_agent_runs_its_tool_with_named_parameters(example: Path, docs_index: SqliteFtsRetriever) -> None:
    result = run_scripted(example, docs_index, "assistant/react_json")
    [tool] = result.trace.spans("execute_tool")
    assert tool.attributes["registry.tool.arguments"] == {"path": "."}
    second = result.trace.spans("chat")[1].attributes["registry.input_messages"]
    assert json.loads(second[-1]["content"])["observation"].startswith('{"tool": "list_directory"')


@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_runs_the_same_through_a_real_openai_compatible_server(
    example: Path, docs_index: SqliteFtsRetriever, agent: str, tmp_path: Path
) -> None:
    scripted = run_scripted(example, docs_index, agent)
    # The replies the scripted run got, in the order they were asked for.
    chats = sorted(scripted.trace.spans("chat"), key=lambda span: span.started)
    replies = []
    for chat in chats:
        reply = chat.attributes["registry.reply"]
        calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in reply.get("tool_calls", [])]
        replies.append(
            {"tool_calls": calls, "content": reply["content"] or None} if calls else {"content": reply["content"]}
        )
    with ScriptedModelServer(replies, tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", max_retries=0)
        # An agent that names no model runs on the one the operator names.
        unnamed = {"model_name": "served-model"} if agent in NO_SCHEMA_INPUTS else {}
        with executor_for(
            example, model, tools=[library_tools()], retrievers={"product-docs": docs_index}, **unnamed
        ) as executor:
            result = executor.run(agent, example_inputs(agent))
        sent = server.requests()
    assert (result.outcome, result.output, result.llm_calls) == (scripted.outcome, scripted.output, scripted.llm_calls)
    assert len(sent) == len(chats)
    asked = sorted(result.trace.spans("chat"), key=lambda span: span.started)
    assert [body["model"] for body in sent] == [chat.attributes["gen_ai.request.model"] for chat in asked]
    if result.usage.input_tokens is not None:
        assert result.usage.input_tokens == 10 * result.llm_calls  # what the server reports per call
