"""Every agent of the bundled library runs through a real OpenAI-compatible
HTTP server (its own process) with the official SDK, and gives the same run as
with the scripted model: the same replies in the same order. The server plays
a generic compatible server, llama.cpp's (which refuses null content and
drops tools sent without a tool_choice; the adapter, told it is llama.cpp,
streams every call) and OpenAI's strict validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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

# A flavor of the scripted server, and the adapter's options for that server.
SERVERS: dict[str, dict[str, Any]] = {
    "generic": {},
    "llama.cpp": {"server": "llama.cpp"},
    "strict": {"kind": "openai"},
}


@pytest.mark.parametrize("flavor", SERVERS)
@pytest.mark.parametrize("agent", LIBRARY_AGENTS)
def test_every_library_agent_runs_the_same_through_a_real_openai_compatible_server(
    example: Path, docs_index: SqliteFtsRetriever, agent: str, flavor: str, tmp_path: Path
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
    with ScriptedModelServer(replies, tmp_path, flavor=flavor) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="test-key", max_retries=0, **SERVERS[flavor])
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
    # llama.cpp's calls stream, except those where it chooses the tool, which it cannot stream.
    streamed = [flavor == "llama.cpp" and body.get("tool_choice") != "auto" for body in sent]
    assert [body.get("stream", False) for body in sent] == streamed
    if flavor != "llama.cpp":  # llama.cpp's streams carry no usage
        assert result.usage.input_tokens == 10 * result.llm_calls  # what the server reports per call
    for body in sent:
        assert all(message.get("content") is not None for message in body["messages"])
        assert ("tool_choice" in body) == ("tools" in body)
