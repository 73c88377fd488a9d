"""What a chat span records about who served a call: the provider the
definition asked for, the binding and route the router took, the model
sent, the parameters that provider does not take, what the adapter sent
otherwise than asked, and a warning when the reply names another model
than the one sent."""

from __future__ import annotations

from typing import Any

from registry.providers.chat import ChatReply, ChatRequest
from registry.providers.params import KINDS, split

_SNAPSHOT_SEPARATORS = ("-", ":")


def requested(request: ChatRequest) -> dict[str, Any]:
    """The span attributes known before the call: the provider the definition names."""
    return {"registry.model.requested.provider": request.provider} if request.provider is not None else {}


def served(request: ChatRequest, reply: ChatReply) -> dict[str, Any]:
    """The span attributes of the binding that answered (none without a router)."""
    by = reply.served_by
    if by is None:
        return {}
    attributes: dict[str, Any] = {
        "registry.provider.binding": by.provider,
        "registry.provider.kind": by.kind,
        "registry.model.sent": by.model,
    }
    if by.route is not None:
        attributes["registry.route"] = by.route
    if by.kind in KINDS:
        dropped = split(by.kind, request.params).dropped
        if dropped:
            attributes["registry.params.dropped"] = list(dropped)
    return attributes


def model_mismatch(agent: str, request: ChatRequest, reply: ChatReply) -> str | None:
    """A warning when the reply names a model other than the one sent, else None."""
    sent = reply.served_by.model if reply.served_by is not None else request.model
    answered = reply.model
    if answered is None or _same_model(sent, answered):
        return None
    return f"{agent}: model {sent!r} was asked for, and the reply names {answered!r}"


def _same_model(sent: str, answered: str) -> bool:
    # An alias is answered with the snapshot it points to: gpt-4o with
    # gpt-4o-2024-08-06, llama3 with llama3:latest. Not a different model.
    return answered == sent or answered.startswith(tuple(sent + separator for separator in _SNAPSHOT_SEPARATORS))


def reply_attributes(reply: ChatReply) -> dict[str, Any]:
    """What a chat span records of the reply: itself, and the GenAI attributes it gives."""
    attributes: dict[str, Any] = {"registry.reply": reply.as_dict()}
    if reply.model is not None:
        attributes["gen_ai.response.model"] = reply.model
    if reply.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = [reply.finish_reason]
    if reply.response_id is not None:
        attributes["gen_ai.response.id"] = reply.response_id
    if reply.usage is not None:
        attributes["gen_ai.usage.input_tokens"] = reply.usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = reply.usage.output_tokens
    if reply.adjustments:
        # Lists of strings, which OpenTelemetry carries as they are: what
        # was adjusted, to filter on, and each adjustment in words.
        attributes["registry.provider.adjusted"] = sorted({item.subject for item in reply.adjustments})
        attributes["registry.provider.adjustments"] = [item.detail for item in reply.adjustments]
    return attributes
