"""The server-sent events of a streamed Chat Completions reply, as the
scripted server (tests/support/openai_server.py) sends them.

A reply streams as OpenAI streams it: a first chunk with the role, the
content in pieces, each tool call as a first delta (index, id, name) and
then its arguments in pieces, a last chunk with the finish reason, a usage
chunk with no choices when ``stream_options.include_usage`` asked for one,
and ``data: [DONE]``. The ``llama.cpp`` flavor repeats the id and the name
in every delta of a tool call, as llama-cpp-python does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

DONE = b"data: [DONE]\n\n"


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


class ChunkMaker:
    """The chunks of one streamed reply, sharing its id, time and model."""

    def __init__(self, number: int, model: str) -> None:
        self.head = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

    def delta(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return event({**self.head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def usage(self) -> bytes:
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return event({**self.head, "choices": [], "usage": usage})


def reply_events(
    reply: dict[str, Any], calls: list[dict[str, Any]], chunks: ChunkMaker, *, flavor: str, usage: bool
) -> Iterator[bytes]:
    """Every event of ``reply`` (with ``calls``, the tool calls it makes), in order."""
    size = int(reply.get("chunk_chars", 8))
    yield chunks.delta({"role": "assistant", "content": ""})
    content = reply.get("chunks")
    if content is None:
        content = pieces(str(reply.get("content") or ""), size)
    for piece in content:
        yield chunks.delta({"content": piece})
    for index, call in enumerate(calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        arguments = call["function"]["arguments"]
        if flavor == "llama.cpp":
            # Every delta names the call again (llama-cpp-python's stream).
            for fragment in pieces(arguments, size) or [""]:
                function = {"name": call["function"]["name"], "arguments": fragment}
                yield chunks.delta({"tool_calls": [{**head, "function": function}]})
            continue
        yield chunks.delta({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        for fragment in pieces(arguments, size):
            yield chunks.delta({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunks.delta({}, "tool_calls" if calls else "stop")
    if usage:
        yield chunks.usage()
    yield DONE
