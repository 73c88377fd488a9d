"""The ``litellm`` kind: LiteLLM (the ``providers`` extra) reaching the
scripted OpenAI-compatible server over HTTP, as its ``hosted_vllm``
provider (LiteLLM's own HTTP client, as for most providers) and as its
``openai`` provider (through the ``openai`` SDK): replies, tool calls,
streams, retries, deadlines, errors as ``ModelError``s, keys never shown,
and a models-file binding served through the router. A small server in a
thread (tests/support/header_server.py) answers what the scripted one
cannot: a ``Retry-After`` header, a body cut short."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.providers.chat import ChatReply, ChatRequest, ServedBy, StreamItem, TextDelta, ToolCallRequest, Usage
from registry.providers.modelsfile import load_models_file
from registry.providers.router import RoutingChatModel
from tests.support.header_server import Answer, HeaderServer, completion_body
from tests.support.openai_server import ScriptedModelServer

if TYPE_CHECKING:
    from registry.providers.litellm_chat import LiteLLMChatModel

TOOLS = ({"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},)
KEY = "sk-litellm-test-4c1d"
PROVIDERS = ("hosted_vllm", "openai")
_T = TypeVar("_T")


def _request(**options: Any) -> ChatRequest:
    return ChatRequest(model="qwen", messages=({"role": "user", "content": "hi"},), **options)


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else []
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "qwen-7b", "choices": choices}
    return f"data: {json.dumps({**body, 'usage': usage})}\n\n"


def _litellm(**options: Any) -> LiteLLMChatModel:
    # Imported here, not at the top: LiteLLM's import is seconds of CPU, which
    # every pytest worker would otherwise pay while collecting, running this module or not.
    from registry.providers.litellm_chat import LiteLLMChatModel

    return LiteLLMChatModel(**options)


def _run(base_url: str, calls: Callable[[LiteLLMChatModel], Awaitable[_T]], **options: Any) -> _T:
    """``calls`` on a fresh model of ``base_url``, closed afterwards."""

    async def scenario() -> _T:
        settings: dict[str, Any] = {"provider": "hosted_vllm", "api_key": KEY, "backoff": 0.01, **options}
        model = _litellm(base_url=base_url, **settings)
        try:
            return await calls(model)
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def _serve(
    replies: list[dict[str, Any]], directory: Path, calls: Callable[[LiteLLMChatModel], Awaitable[_T]], **options: Any
) -> tuple[_T, list[Any]]:
    with ScriptedModelServer(replies, directory) as server:
        return _run(server.base_url, calls, **options), server.requests()


async def _failure(call: Awaitable[object]) -> ModelError:
    try:
        await call
    except ModelError as exc:
        return exc
    raise AssertionError("the call did not fail")


async def _stream_failure(model: LiteLLMChatModel, request: ChatRequest, seen: list[StreamItem]) -> ModelError:
    try:
        async for item in model.stream(request):
            seen.append(item)
    except ModelError as exc:
        return exc
    raise AssertionError("the stream was not refused")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reply_and_a_tool_call_come_back_through_litellm(tmp_path: Path, provider: str) -> None:
    replies: list[dict[str, Any]] = [
        {"content": "hello there"},
        {"tool_calls": [{"name": "search", "arguments": {"q": "x"}}]},
    ]

    async def calls(model: LiteLLMChatModel) -> list[ChatReply]:
        first = await model.complete(_request(params={"temperature": 0.1, "top_k": 5, "stop": ["\n"]}))
        return [first, await model.complete(_request(tools=TOOLS, tool_choice="search"))]

    (text, tool), sent = _serve(replies, tmp_path, calls, provider=provider)
    assert (text.content, text.model, text.finish_reason, text.response_id) == (
        "hello there",
        "qwen",
        "stop",
        "chatcmpl-1",
    )
    assert text.usage == Usage(10, 5)
    assert tool.tool_calls == (ToolCallRequest("call_2_0", "search", '{"q": "x"}'),)
    assert (sent[0]["model"], sent[0]["messages"]) == ("qwen", [{"role": "user", "content": "hi"}])
    assert (sent[0]["temperature"], sent[0]["top_k"], sent[0]["stop"]) == (0.1, 5, ["\n"])
    assert sent[1]["tool_choice"] == {"type": "function", "function": {"name": "search"}}
    assert sent[1]["tools"] == [dict(tool) for tool in TOOLS]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_yields_its_text_then_the_whole_reply(tmp_path: Path, provider: str) -> None:
    stream = (
        _chunk({"role": "assistant", "content": "Hel"})
        + _chunk({"content": "lo"})
        + _chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "search"}}]})
        + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": 1}'}}]}, "tool_calls")
        + _chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})
        + "data: [DONE]\n\n"
    )

    async def calls(model: LiteLLMChatModel) -> list[StreamItem]:
        return [item async for item in model.stream(_request())]

    items, sent = _serve([{"raw": stream}], tmp_path, calls, provider=provider)
    assert items[:2] == [TextDelta("Hel"), TextDelta("lo")]
    reply = items[2]
    assert isinstance(reply, ChatReply) and len(items) == 3
    # The model the server named, not the one asked for (which LiteLLM puts on its chunks).
    assert (reply.content, reply.model, reply.finish_reason) == ("Hello", "qwen-7b", "tool_calls")
    assert reply.tool_calls == (ToolCallRequest("t1", "search", '{"q": 1}'),)
    assert reply.usage == Usage(3, 4)
    assert (sent[0]["stream"], sent[0]["stream_options"]) == (True, {"include_usage": True})


def test_a_429_before_a_stream_begins_is_retried(tmp_path: Path) -> None:
    async def calls(model: LiteLLMChatModel) -> list[StreamItem]:
        return [item async for item in model.stream(_request())]

    replies: list[dict[str, Any]] = [
        {"status": 429},
        {"raw": _chunk({"content": "at last"}, "stop") + "data: [DONE]\n\n"},
    ]
    items, sent = _serve(replies, tmp_path, calls)
    assert items[0] == TextDelta("at last") and len(sent) == 2


def test_a_429_waits_the_seconds_retry_after_asks_for() -> None:
    answers = [
        Answer(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "1"}),
        Answer(200, completion_body("after the wait")),
    ]

    async def calls(model: LiteLLMChatModel) -> ChatReply:
        return await model.complete(_request())

    with HeaderServer(answers) as server:
        reply = _run(server.base_url, calls, max_backoff=1.0)
        (first, _), (second, _) = server.received
    assert reply.content == "after the wait"
    # The backoff alone would have waited at most 0.01 s. A lower bound on the
    # adapter's own sleep, which never ends early, cannot flake; how long it
    # waits, exactly, is tests/providers/test_transport.py's to check.
    assert second - first >= 0.9


def test_a_500_is_retried_and_a_401_is_one_model_error_not_retried(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"status": 500},
        {"content": "after the retry"},
        {"status": 401, "message": "Incorrect API key"},
        {"content": "never asked for"},
    ]

    async def calls(model: LiteLLMChatModel) -> tuple[ChatReply, ModelError]:
        return await model.complete(_request()), await _failure(model.complete(_request()))

    (answered, refused), sent = _serve(replies, tmp_path, calls)
    assert answered.content == "after the retry" and len(sent) == 3
    assert (refused.reason, refused.http_status) == ("status", 401)
    assert str(refused) == "the model provider answered 401 Unauthorized: Incorrect API key"


def test_a_500_forever_fails_after_the_retries(tmp_path: Path) -> None:
    async def calls(model: LiteLLMChatModel) -> ModelError:
        return await _failure(model.complete(_request()))

    refused, sent = _serve([{"status": 500, "repeat": True}], tmp_path, calls, max_retries=2)
    assert len(sent) == 3
    assert (refused.reason, refused.http_status) == ("status", 500)
    assert str(refused) == "the model provider answered 500 Internal Server Error after 2 retries: scripted 500"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_key_the_provider_quotes_back_is_redacted_everywhere(
    tmp_path: Path, provider: str, capfd: pytest.CaptureFixture[str]
) -> None:
    replies = [{"status": 401, "message": "key {authorization} is not valid"}]

    async def calls(model: LiteLLMChatModel) -> ModelError:
        return await _failure(model.complete(_request()))

    refused, _ = _serve(replies, tmp_path, calls, provider=provider)
    assert refused.http_status == 401 and "[redacted]" in str(refused)
    shown = "".join(traceback.format_exception(refused))
    printed = capfd.readouterr()
    assert KEY not in shown and KEY not in printed.out + printed.err


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
def test_a_slow_provider_times_out_as_the_request_says(tmp_path: Path, streamed: bool) -> None:
    async def calls(model: LiteLLMChatModel) -> ModelError:
        if streamed:
            return await _stream_failure(model, _request(timeout=0.5), [])
        return await _failure(model.complete(_request(timeout=0.5)))

    refused, _ = _serve([{"content": "late", "delay": 3}], tmp_path, calls)
    assert (refused.reason, str(refused)) == ("timeout", "the model did not answer within 0.5 s")


def test_a_reply_that_is_not_a_chat_completion_is_refused(tmp_path: Path) -> None:
    async def calls(model: LiteLLMChatModel) -> list[ModelError]:
        return [await _failure(model.complete(_request())) for _ in range(2)]

    (not_json, no_choices), _ = _serve(
        [{"raw": "not JSON at all"}, {"raw": '{"id": "x", "model": "m", "choices": []}'}], tmp_path, calls
    )
    assert not_json.reason == "malformed" and "Unable to get json response" in str(not_json)
    assert (no_choices.reason, str(no_choices)) == ("malformed", "the model provider's reply has no choices")


def test_a_whole_reply_over_the_cap_is_refused(tmp_path: Path) -> None:
    async def calls(model: LiteLLMChatModel) -> ModelError:
        return await _failure(model.complete(_request()))

    refused, _ = _serve([{"content": "x" * 5000}], tmp_path, calls, max_reply_bytes=1000)
    assert (refused.reason, str(refused)) == (
        "too-large",
        "the model's reply is over 1000 bytes; the rest was not read",
    )


_WHOLE = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "a JSON body"}, "finish_reason": "stop"}],
    }
)


@pytest.mark.parametrize(
    ("provider", "reply", "reason", "message"),
    [
        ("hosted_vllm", {"raw": _chunk({"content": "x" * 5000}) + "data: [DONE]\n\n"}, "too-large", "over 1000 bytes"),
        ("openai", {"raw": _chunk({"content": "x" * 5000}) + "data: [DONE]\n\n"}, "too-large", "over 1000 bytes"),
        # A whole completion as JSON where a stream was asked for.
        ("hosted_vllm", {"raw": _WHOLE}, "malformed", "stream ended without any text or tool call"),
        ("openai", {"raw": _WHOLE}, "malformed", "stream ended without any text or tool call"),
        # LiteLLM's own HTTP client (hosted_vllm) skips an event that is not JSON; its OpenAI path refuses it.
        (
            "openai",
            {"raw": _chunk({"content": "Hel"}) + "data: {not json}\n\n" + "data: [DONE]\n\n"},
            "connection",
            "stream broke off: Expecting property name",
        ),
    ],
)
def test_a_stream_too_large_not_a_stream_or_malformed_is_refused(
    tmp_path: Path, provider: str, reply: dict[str, Any], reason: str, message: str
) -> None:
    async def calls(model: LiteLLMChatModel) -> ModelError:
        return await _stream_failure(model, _request(), [])

    refused, _ = _serve([reply], tmp_path, calls, provider=provider, max_reply_bytes=1000)
    assert refused.reason == reason and message in str(refused)


def test_a_stream_cut_mid_reply_is_a_connection_error_after_its_first_text() -> None:
    # The body promises more than it sends, then the connection closes.
    cut = Answer(
        200,
        (_chunk({"content": "Hel"}) + 'data: {"id": "c1", "cho').encode(),
        {"Content-Type": "text/event-stream", "Content-Length": "5000"},
        sized=False,
    )
    seen: list[StreamItem] = []

    async def calls(model: LiteLLMChatModel) -> ModelError:
        return await _stream_failure(model, _request(), seen)

    with HeaderServer([cut]) as server:
        refused = _run(server.base_url, calls)
    assert seen == [TextDelta("Hel")]
    assert refused.reason == "connection" and str(refused).startswith("the model provider's stream broke off: ")


def test_closing_one_adapter_leaves_another_able_to_call(tmp_path: Path) -> None:
    """LiteLLM's HTTP clients are shared by the process: closing one adapter
    closes them, and the next call of another opens new ones."""
    replies: list[dict[str, Any]] = [{"content": "first"}, {"content": "second"}]

    async def calls(base_url: str) -> list[str]:
        first = _litellm(provider="openai", base_url=base_url, api_key=KEY)
        second = _litellm(provider="openai", base_url=base_url, api_key=KEY)
        try:
            answered = [(await first.complete(_request())).content]
            await first.aclose()
            return answered + [(await second.complete(_request())).content]
        finally:
            await second.aclose()

    with ScriptedModelServer(replies, tmp_path) as server:
        assert asyncio.run(calls(server.base_url)) == ["first", "second"]


def test_a_provider_litellm_does_not_know_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"LiteLLM has no provider 'mistrall'; did you mean 'mistral'\?"):
        _litellm(provider="mistrall")


def test_a_models_file_binding_of_kind_litellm_is_served_through_the_router(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"content": "served"}, {"raw": _chunk({"content": "streamed"}, "stop")}]
    with ScriptedModelServer(replies, tmp_path) as server:
        models = tmp_path / "models.yml"
        models.write_text(
            "providers:\n"
            f"  gateway: {{kind: litellm, provider: hosted_vllm, base_url: {server.base_url!r}, api_key_env: GW_KEY}}\n"
            "routes:\n"
            "  - match: {provider: mistral}\n"
            "    use: {provider: gateway, name: qwen}\n",
            encoding="utf-8",
        )
        router = RoutingChatModel(load_models_file(models), environ={"GW_KEY": KEY}, max_retries=0)

        async def calls() -> tuple[ChatReply, list[StreamItem]]:
            try:
                direct = await router.complete(_request(provider="gateway"))
                routed = ChatRequest(
                    model="mistral-small", messages=({"role": "user", "content": "hi"},), provider="mistral"
                )
                return direct, [item async for item in router.stream(routed)]
            finally:
                await router.aclose()

        assert router.binding_problem("gateway") is None
        direct, streamed = asyncio.run(calls())
        sent = server.requests()
    assert direct.content == "served"
    assert direct.served_by == ServedBy("gateway", "litellm", "qwen")
    assert streamed[0] == TextDelta("streamed")
    last = streamed[-1]
    assert isinstance(last, ChatReply) and last.served_by is not None
    assert (last.served_by.provider, last.served_by.model) == ("gateway", "qwen")
    assert last.served_by.route == "routes[0]: mistral/* -> gateway/qwen"
    assert [body["model"] for body in sent] == ["qwen", "qwen"]


def test_importing_the_adapter_fetches_nothing_and_keeps_the_operators_settings() -> None:
    """LiteLLM's price list is pointed at a server of ours: it is never asked for."""
    script = (
        "import os\n"
        "import registry.providers.litellm_chat\n"
        "print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'], os.environ['LITELLM_OFFLINE_MODE'])\n"
    )
    with HeaderServer([Answer(200, b"{}")]) as server:
        environ = {key: value for key, value in os.environ.items() if not key.startswith("LITELLM_")}
        environ.update(LITELLM_MODEL_COST_MAP_URL=server.base_url + "/prices.json", LITELLM_OFFLINE_MODE="false")
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True, env=environ
        )
        asked = list(server.received)
    assert done.stdout.split() == ["True", "false"]
    assert asked == []
