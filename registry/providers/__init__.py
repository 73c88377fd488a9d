"""Talking to model providers: the ``ChatModel`` interface (a request, its
reply, the reply as it streams) and its adapters over the providers'
official SDKs, the HTTP limits they share, the operator's models file and
the router that binds each definition's ``model.provider`` to one of them.

May import: ``registry.errors``, ``registry.models``,
``registry.format.safeyaml`` (the models file is YAML read as definitions
are) and ``registry.client.retry_after``; never the server, the executor or
the client's transports: a gateway talks to models with the client's
dependencies and the SDKs.
"""

from registry.providers.chat import (
    ChatModel,
    ChatReply,
    ChatRequest,
    ResponseFormat,
    ServedBy,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    Usage,
)
from registry.providers.openai_chat import OpenAIChatModel

__all__ = [
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "OpenAIChatModel",
    "ResponseFormat",
    "ServedBy",
    "StreamItem",
    "TextDelta",
    "ToolCallRequest",
    "Usage",
]
