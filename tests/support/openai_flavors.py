"""What the scripted OpenAI-compatible server (tests/support/openai_server.py)
refuses, per flavor: the differences of real servers that an adapter must
handle, each reproduced from where it was seen.

- ``generic``: accepts anything (the server as it always was).
- ``strict``: OpenAI's own validation, as its API answers (400s worded as
  OpenAI words them): an argument it does not know (``top_k``),
  ``tool_choice`` or ``parallel_tool_calls`` without tools,
  ``stream_options`` without ``stream``, a JSON schema without a name, a
  ``tool`` message answering no tool call, ``max_tokens`` to a reasoning
  model (o1, o3, o4-mini, the gpt-5 family and later: "Use
  'max_completion_tokens' instead").
- ``llama.cpp``: llama-cpp-python's server (0.3.36, measured on this
  machine with SmolLM2, and its ``chatml-function-calling`` handler read):
  an assistant turn with ``"content": null`` is a 500 (its request model
  wants a string); ``response_format`` other than ``text``/``json_object``
  is a 500; ``tool_choice: required`` is a 500 (the handler asserts
  ``auto``); tools without a ``tool_choice`` are dropped from the prompt,
  so the model answers in text; any model name is accepted and echoed;
  streams carry no usage and repeat the call's id and name in every
  tool-call delta (see ``openai_stream``); a stream with ``tool_choice:
  auto`` ends with no event after a 200 (its handler raises).
- ``vllm``: vLLM's OpenAI server (``vllm/entrypoints/openai``): a model name
  it does not serve is a 404 (``_check_model``: "The model `x` does not
  exist."); ``tool_choice: auto`` is a 400 unless the server was started
  with ``--enable-auto-tool-choice``. Unknown fields are ignored (with a
  warning in vLLM's log), as here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

FLAVORS = ("generic", "strict", "llama.cpp", "vllm")

REASONING_MODELS = re.compile(r"^(o\d|gpt-([5-9]|\d\d)|codex-)")
"""OpenAI's models that refuse ``max_tokens``: the o-series (``o1``,
``o3-mini``, ``o4-mini-2025-04-16``), the gpt-5 family and those after it,
``codex-mini-latest``."""

# The Chat Completions arguments OpenAI's API knows (what ``strict`` accepts).
_OPENAI_ARGUMENTS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "n",
        "user",
        "reasoning_effort",
        "response_format",
        "stream",
        "stream_options",
        "metadata",
        "store",
        "service_tier",
        "modalities",
        "prediction",
        "verbosity",
        "functions",
        "function_call",
    }
)


def error_body(message: str, kind: str, **more: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None, **more}}


def refusal(
    flavor: str, body: Mapping[str, Any], *, served_model: str | None, auto_tool_choice: bool
) -> tuple[int, dict[str, Any]] | None:
    """The error answer ``flavor`` gives to ``body``, or None when it accepts it."""
    if flavor == "strict":
        return _openai_refusal(body)
    if flavor == "llama.cpp":
        return _llama_cpp_refusal(body)
    if flavor == "vllm":
        return _vllm_refusal(body, served_model, auto_tool_choice)
    return None


def _openai_refusal(body: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    unknown = sorted(set(body) - _OPENAI_ARGUMENTS)
    if unknown:
        return 400, error_body(f"Unrecognized request argument supplied: {unknown[0]}", "invalid_request_error")
    if "max_tokens" in body and REASONING_MODELS.match(str(body.get("model"))):
        message = (
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
        )
        return 400, error_body(message, "invalid_request_error", param="max_tokens", code="unsupported_parameter")
    for option in ("tool_choice", "parallel_tool_calls"):
        if option in body and not body.get("tools"):
            message = f"Invalid value for '{option}': '{option}' is only allowed when 'tools' are specified."
            return 400, error_body(message, "invalid_request_error", param=option)
    if "stream_options" in body and not body.get("stream"):
        message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        return 400, error_body(message, "invalid_request_error", param="stream_options")
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema" and not (response_format.get("json_schema") or {}).get("name"):
        message = "Missing required parameter: 'response_format.json_schema.name'."
        return 400, error_body(message, "invalid_request_error", param="response_format.json_schema.name")
    answered: set[str] = set()
    for message in body.get("messages") or []:
        answered.update(call.get("id") for call in message.get("tool_calls") or [])
        if message.get("role") == "tool" and message.get("tool_call_id") not in answered:
            text = (
                "Invalid parameter: messages with role 'tool' must be a response "
                "to a preceeding message with 'tool_calls'."
            )
            return 400, error_body(text, "invalid_request_error", param="messages")
    return None


def _llama_cpp_refusal(body: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    for index, message in enumerate(body.get("messages") or []):
        if message.get("role") == "assistant" and message.get("content") is None:
            text = (
                f"1 validation error: {{'type': 'string_type', 'loc': ('body', 'messages', {index}, "
                "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string'}"
            )
            return 500, error_body(text, "internal_server_error")
    kind = (body.get("response_format") or {}).get("type")
    if kind not in (None, "text", "json_object"):
        text = (
            "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
            "'msg': \"Input should be 'text' or 'json_object'\"}"
        )
        return 500, error_body(text, "internal_server_error")
    if body.get("tool_choice") == "required" and body.get("tools"):
        return 500, error_body("", "internal_server_error")  # an AssertionError, which says nothing
    return None


def _vllm_refusal(
    body: Mapping[str, Any], served_model: str | None, auto_tool_choice: bool
) -> tuple[int, dict[str, Any]] | None:
    model = body.get("model")
    if served_model is not None and model != served_model:
        message = f"The model `{model}` does not exist."
        return 404, {"error": {"message": message, "type": "NotFoundError", "param": "model", "code": 404}}
    if body.get("tools") and body.get("tool_choice") == "auto" and not auto_tool_choice:
        message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        return 400, {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
    return None


def tool_calls_reach_the_client(flavor: str, body: Mapping[str, Any]) -> bool:
    """Whether a scripted reply's tool calls are sent as tool calls. A
    scripted model may call a tool it was not offered (a hostile case), so
    they are, except by llama.cpp, whose function-calling handler drops the
    tools unless a ``tool_choice`` other than ``none`` is sent: its model
    answers in text then."""
    if flavor != "llama.cpp":
        return True
    return bool(body.get("tools")) and body.get("tool_choice") not in (None, "none")


def fails_to_stream(flavor: str, body: Mapping[str, Any]) -> bool:
    """llama.cpp's function-calling handler cannot stream when it picks the
    tool (``tool_choice: auto``): its answer's head says 200, then the body
    ends with no event ("Automatic streaming tool choice is not supported")."""
    return flavor == "llama.cpp" and bool(body.get("tools")) and body.get("tool_choice") == "auto"


def answers_with_usage_in_streams(flavor: str, body: Mapping[str, Any]) -> bool:
    """Whether a stream ends with a usage chunk: when asked for, except by
    llama-cpp-python, which ignores ``stream_options``."""
    options = body.get("stream_options") or {}
    return flavor != "llama.cpp" and bool(options.get("include_usage"))
