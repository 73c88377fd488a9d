"""Every agent of the bundled library runs end to end: with the scripted
model, then through a real OpenAI-compatible HTTP server with the official
SDK, where the same replies in the same order must give the same run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from registry.executor import COMPLETED, OpenAIChatModel, PythonTools, SqliteFtsRetriever
from registry.executor.executor import RunResult
from registry.settings import BUNDLED_LIBRARY
from tests.executor_fixtures import executor_for
from tests.openai_server import ScriptedModelServer

AGENTS_DIR = Path(BUNDLED_LIBRARY) / "ai_gateway" / "agents"
AGENTS = sorted(
    f"{path.parent.name}/{path.stem}" for path in AGENTS_DIR.glob("*/*.yml") if not path.parent.name.startswith("_")
)

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
# The inputs of the agents that declare no inputs schema, for their templates.
NO_SCHEMA_INPUTS: dict[str, dict[str, Any]] = {
    "chat/minimal": {"question": "What is a merge train?", "tools": []},
    "commit_message/one_line": {"diff": "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"},
}


def scripted_replies() -> list[dict[str, Any]]:
    replies = [{**reply, "agent": agent} for agent, listed in REPLIES.items() for reply in listed]
    return replies + [{"content": "A plain answer.", "repeat": True}]


def example_inputs(agent: str) -> dict[str, Any]:
    usecase, name = agent.split("/")
    definition = yaml.safe_load((AGENTS_DIR / usecase / f"{name}.yml").read_text(encoding="utf-8"))
    examples = definition.get("examples") or []
    if examples:
        inputs: dict[str, Any] = examples[0]["inputs"]
        return inputs
    if "inputs" not in definition:
        return NO_SCHEMA_INPUTS[agent]
    schema = definition["inputs"]
    properties = schema.get("properties") or {}
    return {name: _sample(properties[name]) for name in schema.get("required") or []}


def _sample(schema: dict[str, Any]) -> Any:
    """A value of ``schema`` for the agents without an example: their required inputs."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "integer" or kind == "number":
        return schema.get("minimum", 1)
    if kind == "array":
        return [_sample(schema.get("items") or {})] * schema.get("minItems", 0)
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _sample(properties[name]) for name in schema.get("required") or []}
    if kind == "boolean":
        return True
    return "Why does the build fail?"


def library_tools() -> PythonTools:
    """Every tool the library declares, answering with its arguments."""
    names = set()
    for path in AGENTS_DIR.glob("*/*.yml"):
        for tool in yaml.safe_load(path.read_text(encoding="utf-8")).get("tools") or []:
            names.add(tool["name"])
    return PythonTools({name: (lambda name=name, **arguments: {"tool": name, "result": arguments}) for name in names})


def run_scripted(example: Path, docs_index: SqliteFtsRetriever, agent: str) -> RunResult:
    with executor_for(
        example, scripted_replies(), tools=[library_tools()], retrievers={"product-docs": docs_index}
    ) as executor:
        return executor.run(agent, example_inputs(agent))


@pytest.mark.parametrize("agent", AGENTS)
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


@pytest.mark.parametrize("agent", AGENTS)
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
