"""The turns a leaf's loop adds to its conversation, and what it reads from
its inputs: an assistant turn that called tools, a ReAct observation, the
retrieval query of a ``rag`` agent."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from registry.client import Agent
from registry.executor.runtime import Failed, reference
from registry.providers.chat import ChatReply

PASSAGES = "passages"
"""The input a ``rag`` agent's passages are given as."""


def assistant_with_calls(reply: ChatReply) -> dict[str, Any]:
    """The assistant turn of a reply that called tools, as the next call carries it."""
    return {
        "role": "assistant",
        "content": reply.content or None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
        ],
    }


def observation(parser_type: Any, text: str) -> str:
    """What a ReAct agent is told of a tool's result (or of what to fix), in its parser's format."""
    if parser_type == "react_json":
        return json.dumps({"observation": text}, ensure_ascii=False)
    return f"Observation: {text}"


def retrieval_query(agent: Agent, inputs: Mapping[str, Any]) -> str:
    """The retrieval query: the input named ``query`` or ``question``, else
    the one required string input (``passages`` aside)."""
    for name in ("query", "question"):
        if isinstance(inputs.get(name), str):
            return str(inputs[name])
    spec = agent.compiled.spec
    declared, required = spec.declared_inputs, spec.required_inputs
    strings = [
        name
        for name in required
        if name != PASSAGES and isinstance(declared.get(name), dict) and declared[name].get("type") == "string"
    ]
    if len(strings) == 1 and isinstance(inputs.get(strings[0]), str):
        return str(inputs[strings[0]])
    raise Failed(
        f"{reference(agent)}: cannot tell which input is the retrieval query; name it 'query' or 'question',"
        " or declare exactly one required string input"
    )
