"""Every agent of the bundled library runs through the scripted Anthropic
Messages API server (its own process) with the official SDK and the
executor, and gives the same run as with the scripted model: the same
replies in the same order, each request passing the server's checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from registry.executor import SqliteFtsRetriever
from tests.support.anthropic_server import AnthropicServer
from tests.support.executor_fixtures import (
    LIBRARY_AGENTS,
    NO_SCHEMA_INPUTS,
    example_inputs,
    executor_for,
    library_tools,
    run_scripted,
)

if TYPE_CHECKING:
    from registry.providers.anthropic_chat import AnthropicChatModel


def _model(base_url: str) -> AnthropicChatModel:
    # Imported here, not at the top: the anthropic SDK's import is seconds of CPU,
    # which every pytest worker would otherwise pay while collecting, running this module or not.
    from registry.providers.anthropic_chat import AnthropicChatModel

    return AnthropicChatModel(api_key="sk-ant-test", base_url=base_url, max_retries=0)


@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_runs_the_same_through_the_anthropic_server(
    example: Path, docs_index: SqliteFtsRetriever, agent: str, tmp_path: Path
) -> None:
    scripted = run_scripted(example, docs_index, agent)
    # The replies the scripted run got, in the order they were asked for.
    chats = sorted(scripted.trace.spans("chat"), key=lambda span: span.started)
    replies: list[dict[str, Any]] = []
    for chat in chats:
        reply = chat.attributes["registry.reply"]
        calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in reply.get("tool_calls", [])]
        replies.append({"tool_calls": calls, "content": reply["content"]} if calls else {"content": reply["content"]})
    with AnthropicServer(replies, tmp_path) as server:
        model = _model(server.base_url)
        # An agent that names no model runs on the one the operator names.
        unnamed = {"model_name": "claude-served"} if agent in NO_SCHEMA_INPUTS else {}
        with executor_for(
            example, model, tools=[library_tools()], retrievers={"product-docs": docs_index}, **unnamed
        ) as executor:
            result = executor.run(agent, example_inputs(agent))
        sent = server.requests()
    assert (result.outcome, result.output, result.llm_calls) == (scripted.outcome, scripted.output, scripted.llm_calls)
    assert len(sent) == len(chats)
    asked = sorted(result.trace.spans("chat"), key=lambda span: span.started)
    assert [body["model"] for body in sent] == [chat.attributes["gen_ai.request.model"] for chat in asked]
    assert result.usage.input_tokens == 10 * result.llm_calls  # what the server reports per call


def test_a_reply_calling_a_tool_that_was_not_offered_is_answered_with_an_error_result(
    example: Path, tmp_path: Path
) -> None:
    replies: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "drop_database", "arguments": {"confirm": True}}]},
        {"when": "no tool named 'drop_database'", "content": "Labels: bug. Priority: P3."},
    ]
    with AnthropicServer(replies, tmp_path) as server:
        model = _model(server.base_url)
        with executor_for(example, model, tools=[library_tools()]) as executor:
            result = executor.run("assistant/tools_triage", example_inputs("assistant/tools_triage"))
        first, second = server.requests()
    assert (result.outcome, result.output) == ("completed", "Labels: bug. Priority: P3.")
    assert [tool["name"] for tool in first["tools"]] == ["search_issues", "get_issue"]
    assert first["tool_choice"] == {"type": "auto"}
    (answer,) = second["messages"][-1]["content"]
    assert answer["type"] == "tool_result" and answer["tool_use_id"] == "toolu_1_0"
    assert answer["content"].startswith("Error: there is no tool named 'drop_database'")
