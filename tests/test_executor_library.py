"""Every agent of the bundled library runs end to end: with the scripted
model, then through a real OpenAI-compatible HTTP server with the official
SDK, where the same replies in the same order must give the same run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from registry.executor import COMPLETED, OpenAIChatModel, SqliteFtsRetriever
from registry.executor.executor import RunResult
from tests.executor_fixtures import LIBRARY_AGENTS, NO_SCHEMA_INPUTS, example_inputs, executor_for, library_tools
from tests.openai_server import ScriptedModelServer

# Replies that satisfy each agent's parser; any other agent replies in text.
REPLIES: dict[str, list[dict[str, Any]]] = {
    "compliance/response_gate": [{"content": '{"allow": true}', "repeat": True}],
    "support/classify_request": [{"content": '{"label": "billing"}', "repeat": True}],
    "qa/short_answer": [{"content": '{"reasoning": "counted", "answer": "42"}', "repeat": True}],
    "triage/issue_chunk": [{"content": "[]", "repeat": True}],
    "code_writing/review_function": [
        {"content": '{"pass": false, "feedback": "name the function better"}'},
        {"content": '{"pass": true, "feedback": ""}', "repeat": True},
    ],
    "assistant/react_text": [
        {"content": 'Thought: list them\nAction: list_jobs\nAction Input: {"pipeline_id": 7}'},
        {"content": "Thought: found it\nFinal Answer: the test job timed out", "repeat": True},
    ],
    "assistant/react_json": [
        {
            "content": '{"thought": "look", "action": {"tool_name": "list_directory", "tool_params": [{"name": "path", "value": "."}]}, "answer": null}'
        },
        {"content": '{"thought": "done", "action": null, "answer": "it is a Python project"}', "repeat": True},
    ],
    "assistant/tools_triage": [
        {"tool_calls": [{"name": "search_issues", "arguments": {"query": "crash on start"}}]},
        {"content": "Duplicate of #12.", "repeat": True},
    ],
}


def scripted_replies() -> list[dict[str, Any]]:
    replies = [{**reply, "agent": agent} for agent, listed in REPLIES.items() for reply in listed]
    return replies + [{"content": "A plain answer.", "repeat": True}]


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
