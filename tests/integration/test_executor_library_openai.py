"""Every agent of the bundled library runs through a real OpenAI-compatible
HTTP server (its own process) with the official SDK, and gives the same run as
with the scripted model: the same replies in the same order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.executor import OpenAIChatModel, SqliteFtsRetriever
from tests.support.executor_fixtures import (
    LIBRARY_AGENTS,
    NO_SCHEMA_INPUTS,
    example_inputs,
    executor_for,
    library_tools,
    run_scripted,
)
from tests.support.openai_server import ScriptedModelServer


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
