"""What a Chat Completions endpoint answered, read into a ``ChatReply``:
a whole body, or a stream's chunks assembled.

Replies are read from their JSON here rather than from the SDK's parsed
objects: the SDK builds those without validating them, so a body that is
not a chat completion comes back as a string, a list, or a completion
whose fields are missing or of any type. Whatever is not the shape the API
documents is ``ModelError`` reason ``malformed``.

A stream's tool calls come in pieces: the first delta of a call carries its
index, id and name, the next ones pieces of its arguments, keyed by the
index (llama.cpp repeats the id and the name in every delta: the first one
seen is kept). A stream that ends before a chunk gave the finish reason was
cut mid-reply (a dropped connection, a proxy's timeout, llama.cpp
interrupting it for another request): ``ModelError`` reason ``connection``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from registry.errors import ModelError
from registry.providers.chat import ChatReply, ToolCallRequest, Usage
from registry.providers.transport import first_line


def malformed(why: str) -> ModelError:
    return ModelError(f"the model endpoint's reply is not a chat completion: {why}", reason="malformed")


def reply_from_body(body: bytes) -> ChatReply:
    """The ``ChatReply`` in a Chat Completions response body."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise malformed(f"it is not JSON ({first_line(exc)})") from exc
    if not isinstance(data, dict):
        raise malformed(f"it is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise malformed("it has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise malformed("its first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise malformed("its message content is not text")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise malformed("its tool_calls is not a list")
    return ChatReply(
        content=content or "",
        tool_calls=tuple(_tool_call(call) for call in calls),
        usage=usage(data.get("usage")),
        model=text(data.get("model")),
        finish_reason=text(choice.get("finish_reason")),
        response_id=text(data.get("id")),
    )


def _tool_call(call: Any) -> ToolCallRequest:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise malformed("a tool call has no function")
    id_, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
    if not isinstance(id_, str) or not isinstance(name, str) or not isinstance(arguments, str):
        raise malformed("a tool call lacks its id, function name or arguments text")
    return ToolCallRequest(id=id_, name=name, arguments=arguments)


def usage(value: Any) -> Usage | None:
    if not isinstance(value, dict):
        return None
    return Usage(_count(value, "prompt_tokens"), _count(value, "completion_tokens"))


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    # bool is an int to Python, never a token count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class _CallParts:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """The reply of a stream, built chunk by chunk: ``add`` each chunk (the
    JSON of one event), then ``reply()``."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._finish: str | None = None
        self._model: str | None = None
        self._id: str | None = None
        self._usage: Usage | None = None

    def add(self, chunk: Any) -> str:
        """Take one chunk in; the text it adds to the reply (perhaps none)."""
        if not isinstance(chunk, dict):
            raise malformed(f"a streamed chunk is a JSON {type(chunk).__name__}, not an object")
        self._model = self._model or text(chunk.get("model"))
        self._id = self._id or text(chunk.get("id"))
        self._usage = usage(chunk.get("usage")) or self._usage
        choices = chunk.get("choices")
        if choices is None:
            return ""
        if not isinstance(choices, list):
            raise malformed("a streamed chunk's choices is not a list")
        added = ""
        for choice in choices:
            if not isinstance(choice, dict):
                raise malformed("a streamed choice is not an object")
            if choice.get("index", 0) == 0:
                added += self._choice(choice)
        return added

    def _choice(self, choice: dict[str, Any]) -> str:
        self._finish = text(choice.get("finish_reason")) or self._finish
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise malformed("a streamed choice's delta is not an object")
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise malformed("a streamed delta's content is not text")
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise malformed("a streamed delta's tool_calls is not a list")
            for position, call in enumerate(calls):
                self._call_delta(position, call)
        if content:
            self._content.append(content)
        return content or ""

    def _call_delta(self, position: int, call: Any) -> None:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(function, (dict, type(None))):
            raise malformed("a streamed tool call is not an object with a function")
        index = call.get("index", position)
        if not isinstance(index, int):
            raise malformed("a streamed tool call's index is not a number")
        parts = self._calls.setdefault(index, _CallParts())
        id_, name = call.get("id"), (function or {}).get("name")
        arguments = (function or {}).get("arguments")
        if not all(isinstance(value, (str, type(None))) for value in (id_, name, arguments)):
            raise malformed("a streamed tool call's id, name or arguments is not text")
        parts.id = parts.id or id_
        parts.name = parts.name or name
        if arguments:
            parts.arguments.append(arguments)

    def reply(self) -> ChatReply:
        """The whole reply; ``ModelError`` when the stream ended before it did."""
        if self._finish is None:
            received = sum(len(piece) for piece in self._content)
            raise ModelError(
                f"the model endpoint's stream ended before the reply did ({received} characters came, "
                "and no finish_reason)",
                reason="connection",
            )
        calls = []
        for index in sorted(self._calls):
            parts = self._calls[index]
            if not parts.id or not parts.name:
                raise malformed(f"streamed tool call {index} came without its id or name")
            calls.append(ToolCallRequest(id=parts.id, name=parts.name, arguments="".join(parts.arguments)))
        return ChatReply(
            content="".join(self._content),
            tool_calls=tuple(calls),
            usage=self._usage,
            model=self._model,
            finish_reason=self._finish,
            response_id=self._id,
        )
