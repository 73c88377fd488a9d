"""The model interface of the executor: one chat completion request and its reply.

Every model the executor can talk to implements ``ChatModel``: the OpenAI
Chat Completions client (``registry.executor.openai_chat``) and the scripted
model (``registry.executor.scripted``). Requests and replies are plain
frozen data in the Chat Completions shapes (messages as ``{"role",
"content", ...}`` dicts, tools as ``{"type": "function", "function": ...}``),
so that a trace can carry them as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

MAX_REPLY_BYTES = 4 * 1024 * 1024
"""The largest response body the executor reads from a model endpoint:
past it the reply is refused (``ModelError``, reason ``too-large``) without
reading the rest, so that a runaway reply costs bounded memory."""


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for, natively (``tool_calls``)."""

    id: str
    name: str
    arguments: str
    """The arguments as the model wrote them: JSON text, perhaps invalid."""

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class ChatRequest:
    """One call to the model."""

    model: str
    """The model name sent in the request (the definition's ``model.name``,
    unless the operator maps or overrides it)."""
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    """Function tools in the Chat Completions format; empty: none offered."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Sampling parameters: temperature, top_p, top_k, max_tokens, stop."""
    timeout: float | None = None
    """Seconds to wait for the reply (the definition's ``params.timeout``)."""
    agent: str | None = None
    """The agent (``usecase/name``) this call is for; never sent to the
    model: the scripted model matches replies on it."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in self.messages]}
        if self.tools:
            out["tools"] = [dict(t) for t in self.tools]
        if self.params:
            out["params"] = dict(self.params)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out


@dataclass(frozen=True)
class ChatReply:
    """The model's reply: its text, the tools it asked for, and what the endpoint reported."""

    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage | None = None
    model: str | None = None
    """The model the endpoint says answered."""
    finish_reason: str | None = None
    response_id: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatReply:
        """The reply ``as_dict`` gave (a journal keeps replies so)."""
        usage = data.get("usage")
        return cls(
            content=str(data.get("content") or ""),
            tool_calls=tuple(
                ToolCallRequest(str(c["id"]), str(c["name"]), str(c["arguments"])) for c in data.get("tool_calls") or []
            ),
            usage=Usage(usage.get("input_tokens"), usage.get("output_tokens")) if isinstance(usage, dict) else None,
            model=data.get("model"),
            finish_reason=data.get("finish_reason"),
            response_id=data.get("response_id"),
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content": self.content, "finish_reason": self.finish_reason}
        if self.tool_calls:
            out["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        if self.usage is not None:
            out["usage"] = self.usage.as_dict()
        if self.model is not None:
            out["model"] = self.model
        if self.response_id is not None:
            out["response_id"] = self.response_id
        return out


class ChatModel(Protocol):
    """A chat model the executor calls. Implementations are safe to call
    concurrently from one event loop (parallel patterns do)."""

    description: str
    """What it is, for traces and messages: ``openai http://host/v1``, ``scripted replies.yml``."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The model's reply to ``request``. Raises ``registry.errors.ModelError``
        (and nothing else) when there is no usable reply."""
        ...

    async def aclose(self) -> None:
        """Release connections; the model is not called afterwards."""
        ...
