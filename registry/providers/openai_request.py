"""The Chat Completions request an OpenAI adapter sends: a ``ChatRequest``
in the vocabulary of the endpoint (OpenAI, Azure OpenAI, an
OpenAI-compatible server) and of the server behind it, with what had to be
changed on the way (``Adjustment`` s, which the adapter puts on the reply
for the trace to say).

What differs, and why (docs/executor.md, "OpenAI and OpenAI-compatible
servers", has the table):

- ``model.params`` go through ``params.split``: the arguments the SDK has
  are sent as such, the others (``top_k``, ``min_p``...) as extra body
  fields; OpenAI and Azure get ``max_tokens`` as ``max_completion_tokens``
  (their reasoning models refuse ``max_tokens``), compatible servers as
  ``max_tokens``; llama.cpp calls ``repetition_penalty`` ``repeat_penalty``.
- ``tool_choice`` is sent whenever tools are (llama.cpp's function-calling
  handler drops the tools otherwise), ``auto`` unless the definition says;
  a tool's name becomes ``{"type": "function", "function": {"name": ...}}``.
  llama.cpp answers 500 to ``required``: it gets the one tool offered by
  name, or ``auto`` when there are several.
- ``parallel_tool_calls`` only with tools (OpenAI refuses it without).
- An assistant turn that called tools is sent with ``""`` content rather
  than null (llama.cpp answers 500 to null).
- llama.cpp cannot stream a reply when it chooses the tool itself (its
  function-calling handler fails after the answer's head: "Automatic
  streaming tool choice is not supported"): such a call is not streamed.
- Structured output: a JSON schema (``json_schema``, not strict) to OpenAI,
  Azure, vLLM and LiteLLM; llama.cpp takes ``json_object`` with the schema
  beside it (it builds a grammar from it, and refuses ``json_schema``);
  other servers get JSON mode (``json_object``) without the schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from registry.providers.chat import Adjustment, ChatRequest, ResponseFormat
from registry.providers.params import split

Server = Literal["llama.cpp", "vllm", "ollama", "litellm"]
SERVERS: tuple[Server, ...] = ("llama.cpp", "vllm", "ollama", "litellm")
"""The OpenAI-compatible servers whose differences are known (``server=``)."""

OpenAIKind = Literal["openai", "azure_openai", "openai_compatible"]
OPENAI_KINDS: tuple[OpenAIKind, ...] = ("openai", "azure_openai", "openai_compatible")

NATIVE_ARGUMENTS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "parallel_tool_calls",
        "reasoning_effort",
    }
)
"""Arguments of the SDK's ``chat.completions.create``; the rest of the
parameters travel in ``extra_body``."""

_RENAMED: Mapping[Server, Mapping[str, str]] = {"llama.cpp": {"repetition_penalty": "repeat_penalty"}}
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class Dialect:
    """What an endpoint understands: its kind and, for a compatible one, which server it is."""

    kind: OpenAIKind
    server: Server | None = None

    @property
    def takes_json_schema(self) -> bool:
        return self.kind != "openai_compatible" or self.server in ("vllm", "litellm")

    @property
    def name(self) -> str:
        return self.server or ("this server" if self.kind == "openai_compatible" else self.kind)


@dataclass(frozen=True)
class SentRequest:
    """The arguments of one ``chat.completions.create`` call."""

    arguments: Mapping[str, Any]
    """Keyword arguments the SDK has, ``extra_body`` among them when there are extra fields."""
    adjustments: tuple[Adjustment, ...] = ()
    """What was sent otherwise than the request asked (the reply carries them)."""


def build(request: ChatRequest, dialect: Dialect, *, stream: bool) -> SentRequest:
    """``request`` as ``dialect`` takes it, streamed or not."""
    adjustments: list[Adjustment] = []
    arguments: dict[str, Any] = {"model": request.model, "messages": messages(request.messages)}
    if request.tools:
        arguments["tools"] = [dict(tool) for tool in request.tools]
        arguments["tool_choice"] = tool_choice(request.tool_choice or "auto", request.tools, dialect, adjustments)
    extra: dict[str, Any] = {}
    renamed = _RENAMED.get(dialect.server, {}) if dialect.server is not None else {}
    for key, value in split(dialect.kind, request.params).sent.items():
        if key == "parallel_tool_calls" and not request.tools:
            adjustments.append(Adjustment(key, "parallel_tool_calls was not sent: no tools are offered"))
        elif key in NATIVE_ARGUMENTS:
            arguments[key] = value
        else:
            extra[renamed.get(key, key)] = value
    if extra:
        arguments["extra_body"] = extra
    if request.response_format is not None:
        arguments["response_format"] = response_format(request.response_format, dialect, adjustments)
    if stream:
        arguments["stream"] = True
        arguments["stream_options"] = {"include_usage": True}
    return SentRequest(arguments, tuple(adjustments))


def can_stream(request: ChatRequest, dialect: Dialect) -> bool:
    """Whether the reply to ``request`` can be streamed: not from llama.cpp
    when it is sent ``tool_choice: auto``."""
    if dialect.server != "llama.cpp" or not request.tools:
        return True
    choice = request.tool_choice or "auto"
    return choice != "auto" and not (choice == "required" and len(request.tools) > 1)


NOT_STREAMED = Adjustment(
    "stream", "the reply was not streamed: llama.cpp cannot stream a reply when it chooses the tool (auto)"
)
"""What a stream's reply says when it came whole (``can_stream`` said no)."""


def messages(turns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation, each assistant turn that called tools with ``""``
    content rather than none (llama.cpp answers 500 to ``null``)."""
    sent = []
    for turn in turns:
        message = dict(turn)
        if message.get("role") == "assistant" and message.get("tool_calls") and message.get("content") is None:
            message["content"] = ""
        sent.append(message)
    return sent


def tool_choice(
    choice: str, tools: Sequence[Mapping[str, Any]], dialect: Dialect, adjustments: list[Adjustment]
) -> str | dict[str, Any]:
    """``auto``, ``none``, ``required`` or a tool's name, as the server takes it."""
    if choice in ("auto", "none"):
        return choice
    if choice != "required":
        return named_tool(choice)
    if dialect.server != "llama.cpp":
        return choice
    if len(tools) == 1:
        name = str(tools[0]["function"]["name"])
        why = f"tool_choice required was sent as the one tool offered, {name}: llama.cpp refuses required"
        adjustments.append(Adjustment("tool_choice", why))
        return named_tool(name)
    adjustments.append(Adjustment("tool_choice", "tool_choice required was sent as auto: llama.cpp refuses required"))
    return "auto"


def named_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def response_format(wanted: ResponseFormat, dialect: Dialect, adjustments: list[Adjustment]) -> dict[str, Any]:
    """Structured output as the server takes it: a JSON schema, JSON mode
    with the schema (llama.cpp), or JSON mode alone."""
    if wanted.schema is None:
        return {"type": "json_object"}
    schema = dict(wanted.schema)
    if dialect.takes_json_schema:
        # OpenAI takes names of at most 64 letters, digits, _ and -.
        name = _SCHEMA_NAME.sub("_", wanted.name)[:64] or "output"
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}
    if dialect.server == "llama.cpp":
        why = "response_format was sent as json_object with the schema, which llama.cpp takes"
        adjustments.append(Adjustment("response_format", why))
        unbounded, dropped = without_size_bounds(schema)
        if dropped:
            why = (
                f"the schema was sent without {', '.join(sorted(dropped))}: llama.cpp's grammars cannot repeat that far"
            )
            adjustments.append(Adjustment("response_format", why))
        return {"type": "json_object", "schema": unbounded}
    why = f"response_format was sent as json_object, without the schema: {dialect.name} may not take one"
    adjustments.append(Adjustment("response_format", why))
    return {"type": "json_object"}


# Size bounds llama.cpp turns into repetitions of grammar rules. Past its
# limit (rules x repetitions > 2000), llama-cpp-python 0.3.36 fails to build
# the grammar and then crashes the whole server (a segfault, found with
# `maxLength: 6000`). The parser still checks every bound on the reply.
_SIZE_BOUNDS = frozenset({"maxLength", "minLength", "maxItems", "minItems"})


def without_size_bounds(schema: Any) -> tuple[Any, set[str]]:
    """``schema`` with every size bound left out, and which were there."""
    dropped: set[str] = set()

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            dropped.update(key for key in node if key in _SIZE_BOUNDS and not isinstance(node[key], dict))
            return {
                key: strip(value)
                for key, value in node.items()
                if not (key in _SIZE_BOUNDS and not isinstance(value, dict))
            }
        if isinstance(node, list):
            return [strip(item) for item in node]
        return node

    return strip(schema), dropped
