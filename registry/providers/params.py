"""``model.params`` in each provider's vocabulary: one table per adapter kind.

A definition writes its parameters once, in the neutral vocabulary below
(the Chat Completions names, with ``top_k`` and the sampling options
local servers share); each adapter sends what its provider accepts under the
provider's own name, and what it does not accept is never sent silently:
``split`` returns it, the executor records it in the call's span, and
``prompt-registry lint`` warns about it, naming the provider.

docs/executor.md prints these tables ("Parameters, per provider").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ProviderKind = Literal[
    "openai", "azure_openai", "openai_compatible", "anthropic", "anthropic_vertex", "anthropic_bedrock", "litellm"
]
KINDS: tuple[ProviderKind, ...] = (
    "openai",
    "azure_openai",
    "openai_compatible",
    "anthropic",
    "anthropic_vertex",
    "anthropic_bedrock",
    "litellm",
)

NEUTRAL = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "parallel_tool_calls",
    "reasoning_effort",
)
"""The parameters a definition may write, whatever its provider."""

_CHAT_COMPLETIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
    "parallel_tool_calls": "parallel_tool_calls",
    "reasoning_effort": "reasoning_effort",
}
# OpenAI deprecated max_tokens for max_completion_tokens, which every chat
# model of OpenAI's and Azure's takes, and its reasoning models (o1, o3,
# o4-mini, the gpt-5 family) refuse max_tokens with a 400. Sent always, not
# by model name: names come faster than any list of them, and on Azure the
# name is a deployment's, which says nothing of the model behind it.
_OPENAI = {**_CHAT_COMPLETIONS, "max_tokens": "max_completion_tokens"}
_ANTHROPIC = {
    # The Messages API version the anthropic SDK sends (2026-10-21) refuses
    # temperature, top_p and top_k whatever their value: they are dropped,
    # and lint says so, rather than failing every call with a 400.
    "max_tokens": "max_tokens",
    "stop": "stop_sequences",
}

TABLES: Mapping[ProviderKind, Mapping[str, str]] = {
    "openai": _OPENAI,
    "azure_openai": _OPENAI,
    # vLLM, llama.cpp, Ollama and LiteLLM take the sampling options of local
    # models beside OpenAI's (the SDK sends them as extra body fields), and
    # max_tokens, which all of them know (llama.cpp's server knows no other).
    "openai_compatible": {
        **_CHAT_COMPLETIONS,
        "top_k": "top_k",
        "min_p": "min_p",
        "repetition_penalty": "repetition_penalty",
    },
    "anthropic": _ANTHROPIC,
    "anthropic_vertex": _ANTHROPIC,
    "anthropic_bedrock": _ANTHROPIC,
    # The multi-provider library maps the OpenAI names to each provider
    # itself (max_tokens as max_completion_tokens for OpenAI's reasoning models).
    "litellm": {**_CHAT_COMPLETIONS, "top_k": "top_k"},
}

PASSES_UNKNOWN: frozenset[ProviderKind] = frozenset({"openai_compatible"})
"""Kinds that receive keys outside the neutral vocabulary as written: a
local server has options of its own (``mirostat``, ``typical_p``...)."""

WELL_KNOWN: Mapping[str, ProviderKind] = {
    "openai": "openai",
    "azure": "azure_openai",
    "azure_openai": "azure_openai",
    "anthropic": "anthropic",
    "vertex": "anthropic_vertex",
    "bedrock": "anthropic_bedrock",
    "vllm": "openai_compatible",
    "ollama": "openai_compatible",
    "llama.cpp": "openai_compatible",
    "llamacpp": "openai_compatible",
    "litellm": "openai_compatible",
}
"""The kind a definition's ``model.provider`` most likely means when no
models file says (what lint assumes)."""


@dataclass(frozen=True)
class SplitParams:
    """``model.params`` for one provider: what is sent, under its names, and what is not."""

    sent: Mapping[str, Any]
    dropped: tuple[str, ...]
    """Keys the provider does not accept, as the definition wrote them."""


def split(kind: ProviderKind, params: Mapping[str, Any]) -> SplitParams:
    """``params`` (neutral names) as ``kind`` takes them."""
    table = TABLES[kind]
    sent: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in params.items():
        if key in table:
            sent[table[key]] = value
        elif key not in NEUTRAL and kind in PASSES_UNKNOWN:
            sent[key] = value
        else:
            dropped.append(key)
    return SplitParams(sent, tuple(dropped))


def unsupported(kind: ProviderKind, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of ``params`` that ``kind`` would not receive."""
    return split(kind, params).dropped
