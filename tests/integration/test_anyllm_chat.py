"""The ``any_llm`` kind: the multi-provider library (``any-llm-sdk``, the
``providers`` extra) reaching the scripted OpenAI-compatible server through
its own ``vllm`` provider, over HTTP: replies, tool calls, streams, retries
and errors as ``ModelError``s."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

# Skipped where the extra is not installed (any-llm-sdk needs Python 3.11).
pytest.importorskip("any_llm", reason="any-llm-sdk is not installed: pip install 'prompt-registry[providers]'")

from registry.errors import ConfigurationError, ModelError
from registry.providers.anyllm_chat import AnyLLMChatModel
from registry.providers.chat import ChatReply, ChatRequest, StreamItem, TextDelta, ToolCallRequest
from tests.support.openai_server import ScriptedModelServer

TOOLS = ({"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},)


def _request(**options: Any) -> ChatRequest:
    return ChatRequest(model="qwen", messages=({"role": "user", "content": "hi"},), **options)


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else []
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "qwen-7b", "choices": choices}
    return f"data: {json.dumps({**body, 'usage': usage})}\n\n"


def _serve(replies: list[dict[str, Any]], directory: Path, calls: Any, **options: Any) -> tuple[Any, list[Any]]:
    async def scenario(base_url: str) -> Any:
        model = AnyLLMChatModel(provider="vllm", base_url=base_url, api_key="sk-test", backoff=0.01, **options)
        try:
            return await calls(model)
        finally:
            await model.aclose()

    with ScriptedModelServer(replies, directory) as server:
        outcome = asyncio.run(scenario(server.base_url))
        return outcome, server.requests()


def test_a_reply_and_a_tool_call_come_back_through_the_library(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"content": "hello there"},
        {"tool_calls": [{"name": "search", "arguments": {"q": "x"}}]},
    ]

    async def calls(model: AnyLLMChatModel) -> list[ChatReply]:
        first = await model.complete(_request(params={"temperature": 0.1, "top_k": 5, "stop": ["\n"]}))
        return [first, await model.complete(_request(tools=TOOLS, tool_choice="search"))]

    (text, tool), sent = _serve(replies, tmp_path, calls)
    assert (text.content, text.model, text.finish_reason) == ("hello there", "qwen", "stop")
    assert text.usage is not None and (text.usage.input_tokens, text.usage.output_tokens) == (10, 5)
    assert tool.tool_calls == (ToolCallRequest("call_2_0", "search", '{"q": "x"}'),)
    assert (sent[0]["temperature"], sent[0]["top_k"], sent[0]["stop"]) == (0.1, 5, ["\n"])
    assert sent[1]["tool_choice"] == {"type": "function", "function": {"name": "search"}}
    assert sent[1]["tools"] == [dict(tool) for tool in TOOLS]


def test_a_stream_yields_its_text_then_the_whole_reply(tmp_path: Path) -> None:
    stream = (
        _chunk({"role": "assistant", "content": "Hel"})
        + _chunk({"content": "lo"})
        + _chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "search"}}]})
        + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": 1}'}}]}, "tool_calls")
        + _chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
        + "data: [DONE]\n\n"
    )

    async def calls(model: AnyLLMChatModel) -> list[StreamItem]:
        return [item async for item in model.stream(_request())]

    items, sent = _serve([{"raw": stream}], tmp_path, calls)
    assert items[:2] == [TextDelta("Hel"), TextDelta("lo")]
    reply = items[2]
    assert isinstance(reply, ChatReply) and len(items) == 3
    assert (reply.content, reply.model, reply.finish_reason) == ("Hello", "qwen-7b", "tool_calls")
    assert reply.tool_calls == (ToolCallRequest("t1", "search", '{"q": 1}'),)
    assert reply.usage is not None and (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 4)
    assert (sent[0]["stream"], sent[0]["stream_options"]) == (True, {"include_usage": True})


def test_a_429_is_retried_and_a_401_is_one_model_error(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"status": 429},
        {"content": "after the retry"},
        {"status": 401, "message": "Incorrect API key"},
    ]

    async def calls(model: AnyLLMChatModel) -> tuple[ChatReply, ModelError]:
        answered = await model.complete(_request())
        try:
            await model.complete(_request())
        except ModelError as exc:
            return answered, exc
        raise AssertionError("the 401 was not an error")

    (answered, refused), sent = _serve(replies, tmp_path, calls)
    assert answered.content == "after the retry" and len(sent) == 3
    assert (refused.reason, refused.http_status) == ("status", 401)
    assert str(refused).startswith("the model provider answered 401 Unauthorized: ")


@pytest.mark.parametrize(
    ("reply", "reason", "message"),
    [
        (
            {"raw": "data: " + json.dumps({"choices": [{"delta": {"content": "x" * 5000}}]}) + "\n\n"},
            "too-large",
            "over",
        ),
        ({"content": "a JSON body, not a stream"}, "malformed", "stream ended before any of its reply"),
    ],
)
def test_a_stream_too_large_or_empty_is_refused(
    tmp_path: Path, reply: dict[str, Any], reason: str, message: str
) -> None:
    async def calls(model: AnyLLMChatModel) -> ModelError:
        try:
            async for _ in model.stream(_request()):
                pass
        except ModelError as exc:
            return exc
        raise AssertionError("the stream was not refused")

    refused, _ = _serve([reply], tmp_path, calls, max_reply_bytes=1000)
    assert refused.reason == reason and message in str(refused)


def test_a_slow_provider_times_out_as_the_request_says(tmp_path: Path) -> None:
    async def calls(model: AnyLLMChatModel) -> ModelError:
        try:
            await model.complete(_request(timeout=0.2))
        except ModelError as exc:
            return exc
        raise AssertionError("the slow reply was not a timeout")

    refused, _ = _serve([{"content": "late", "delay": 2}], tmp_path, calls)
    assert (refused.reason, str(refused)) == ("timeout", "the model did not answer within 0.2 s")


def test_a_provider_the_library_does_not_know_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="any-llm has no provider 'no-such-provider'"):
        AnyLLMChatModel(provider="no-such-provider")
