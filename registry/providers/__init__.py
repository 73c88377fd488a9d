"""Talking to model providers: the ``ChatModel`` interface (a request, its
reply, the reply as it streams) and its adapters over the providers'
official SDKs, the HTTP limits they share, the operator's models file and
the router that binds each definition's ``model.provider`` to one of them;
and the models that wrap another to record its exchanges, replay them
with no model, or cache its replies on disk (``recording``, ``chatcache``).

The adapters are imported when first named (``OpenAIChatModel``...) or
when the router first uses a binding of their kind, so that importing this
package loads no SDK.

May import: ``registry.errors``, ``registry.models``,
``registry.format.safeyaml`` (the models file is YAML read as definitions
are) and ``registry.client.retry_after``; never the server, the executor or
the client's transports: a gateway talks to models with the client's
dependencies and the SDKs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from registry.providers.chat import (
    Adjustment,
    ChatModel,
    ChatReply,
    ChatRequest,
    ReplyOrigin,
    ResponseFormat,
    ServedBy,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    Usage,
)
from registry.providers.chatcache import CachingChatModel
from registry.providers.exchanges import request_key
from registry.providers.modelsfile import Binding, ModelsFile, Route, load_models_file
from registry.providers.recording import RecordingChatModel, ReplayChatModel, exchange_label
from registry.providers.router import RoutingChatModel

if TYPE_CHECKING:
    from registry.providers.litellm_chat import LiteLLMChatModel
    from registry.providers.openai_chat import OpenAIChatModel

_ADAPTERS = {
    "OpenAIChatModel": "registry.providers.openai_chat",
    "LiteLLMChatModel": "registry.providers.litellm_chat",
}


def __getattr__(name: str) -> Any:
    """An adapter class, its module (and SDK) imported on first use."""
    module = _ADAPTERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Adjustment",
    "Binding",
    "CachingChatModel",
    "ChatModel",
    "ChatReply",
    "ChatRequest",
    "LiteLLMChatModel",
    "ModelsFile",
    "OpenAIChatModel",
    "RecordingChatModel",
    "ReplayChatModel",
    "ReplyOrigin",
    "ResponseFormat",
    "Route",
    "RoutingChatModel",
    "ServedBy",
    "StreamItem",
    "TextDelta",
    "ToolCallRequest",
    "Usage",
    "exchange_label",
    "load_models_file",
    "request_key",
]
