"""The model interface of the executor: one chat request, its reply, and
the reply as it streams.

Every model the executor can talk to implements ``ChatModel``: the provider
adapters of this package and the scripted model
(``registry.executor.scripted``). Requests and replies are plain frozen data
in the Chat Completions shapes (messages as ``{"role", "content", ...}``
dicts, tools as ``{"type": "function", "function": ...}``) whatever the
provider, so that a trace carries them alike; each adapter translates to
its provider's own vocabulary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
class ResponseFormat:
    """Structured output: a JSON value, checked against ``schema`` when there is one."""

    schema: Mapping[str, Any] | None = None
    name: str = "output"
    """A name for the schema, where a provider wants one (OpenAI's ``json_schema.name``)."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "schema": dict(self.schema) if self.schema is not None else None}


@dataclass(frozen=True)
class Adjustment:
    """Something an adapter sent otherwise than the request asked, because
    its provider or server takes it so (llama.cpp refuses ``tool_choice:
    required``; Anthropic has no JSON schema output but a forced tool)."""

    subject: str
    """What of the request: ``tool_choice``, ``response_format``,
    ``parallel_tool_calls``, ``messages`` or ``stream``."""
    detail: str
    """One sentence: what was sent instead, and why."""

    def as_dict(self) -> dict[str, str]:
        return {"subject": self.subject, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Adjustment:
        return cls(str(data["subject"]), str(data["detail"]))


@dataclass(frozen=True)
class ServedBy:
    """Which binding answered a call: what a trace records beside the reply."""

    provider: str
    """The binding's name in the models file (``anthropic``, ``local``...), or the adapter's kind."""
    kind: str
    """The adapter: ``openai``, ``azure_openai``, ``openai_compatible``, ``anthropic``..."""
    model: str
    """The model name sent to it (after any route)."""
    route: str | None = None
    """The route of the models file that sent the call there, as written; None: none matched."""

    def as_dict(self) -> dict[str, Any]:
        out = {"provider": self.provider, "kind": self.kind, "model": self.model}
        if self.route is not None:
            out["route"] = self.route
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServedBy:
        return cls(str(data["provider"]), str(data["kind"]), str(data["model"]), data.get("route"))


ReplyOrigin = Literal["cache", "replay"]
"""Where a reply that no model gave now came from: ``cache`` (a
``CachingChatModel`` entry of an earlier run) or ``replay`` (a
``ReplayChatModel`` file)."""


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
    """Every key of the definition's ``model.params``, in the definition's
    (provider-neutral) vocabulary, with the executor's ``stop``; each adapter
    maps them to its provider's names."""
    provider: str | None = None
    """The definition's ``model.provider``: which binding serves the call."""
    tool_choice: str | None = None
    """``auto``, ``required``, ``none`` or a tool's name; None with no tools."""
    response_format: ResponseFormat | None = None
    """The structured output asked for, when the agent's parser is ``json``."""
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
        if self.provider is not None:
            out["provider"] = self.provider
        if self.tool_choice is not None:
            out["tool_choice"] = self.tool_choice
        if self.response_format is not None:
            out["response_format"] = self.response_format.as_dict()
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
    served_by: ServedBy | None = None
    """The binding that answered, when a router chose one."""
    adjustments: tuple[Adjustment, ...] = ()
    """What the adapter sent otherwise than the request asked, for the
    trace to say; empty when it sent the request as asked."""
    origin: ReplyOrigin | None = None
    """Where the reply came from when no model answered this call (the
    cache, a replay file); None: a model answered it now. A trace keeps it
    with the reply (``registry.reply``), so that a cached answer is never
    taken for a live one."""

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
            served_by=ServedBy.from_dict(data["served_by"]) if isinstance(data.get("served_by"), dict) else None,
            adjustments=tuple(Adjustment.from_dict(item) for item in data.get("adjustments") or []),
            origin=data["origin"] if data.get("origin") in ("cache", "replay") else None,
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
        if self.served_by is not None:
            out["served_by"] = self.served_by.as_dict()
        if self.adjustments:
            out["adjustments"] = [adjustment.as_dict() for adjustment in self.adjustments]
        if self.origin is not None:
            out["origin"] = self.origin
        return out


@dataclass(frozen=True)
class TextDelta:
    """A piece of the reply's text, as the provider streamed it."""

    text: str


StreamItem = TextDelta | ChatReply
"""What ``ChatModel.stream`` yields: text deltas, then the whole ``ChatReply`` last."""


class ChatModel(Protocol):
    """A chat model the executor calls. Implementations are safe to call
    concurrently from one event loop (parallel patterns do)."""

    description: str
    """What it is, for traces and messages: ``openai http://host/v1``, ``scripted replies.yml``."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        """The model's reply to ``request``. Raises ``registry.errors.ModelError``
        (and nothing else) when there is no usable reply."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamItem]:
        """The reply as it comes: ``TextDelta`` items, then the whole
        ``ChatReply`` (whose content is the deltas joined). Closing the
        iterator early (``aclose``, or cancelling the task reading it)
        closes the connection, so that the server stops generating. Raises
        ``ModelError`` (and nothing else), before or between items."""
        ...

    def binding_problem(self, provider: str | None) -> str | None:
        """Why a definition naming ``provider`` cannot be served, in one
        sentence naming the option that binds it; None when it can. The
        executor asks before a run's first call."""
        ...

    async def aclose(self) -> None:
        """Release connections; the model is not called afterwards."""
        ...


async def stream_by_completing(model: ChatModel, request: ChatRequest) -> AsyncIterator[StreamItem]:
    """A stream for a model that answers whole: its reply as one delta, then the reply."""
    reply = await model.complete(request)
    if reply.content:
        yield TextDelta(reply.content)
    yield reply
