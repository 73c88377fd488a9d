"""The OpenAI-compatible model, through the official SDK, against real HTTP
servers: tests/support/openai_server.py as its own process, and a small server in
a thread here for what that one cannot script (response headers, a body
with no length, a compressed body)."""

from __future__ import annotations

import asyncio
import email.utils
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ModelError
from registry.providers.chat import ChatReply, ChatRequest, ToolCallRequest, Usage
from registry.providers.openai_chat import OpenAIChatModel
from tests.support.header_server import Answer, HeaderServer, completion_body
from tests.support.openai_server import ScriptedModelServer
from tests.support.ports import free_port
from tests.support.waits import LATE

FAST = {"backoff": 0.01, "max_backoff": 0.05}
MB = 1000 * 1000


def _request(text: str = "hello", **fields: Any) -> ChatRequest:
    return ChatRequest(model="test-model", messages=({"role": "user", "content": text},), **fields)


def _complete(base_url: str, request: ChatRequest | None = None, **options: Any) -> ChatReply:
    """One call to a fresh model, closed afterwards."""

    async def scenario() -> ChatReply:
        model = OpenAIChatModel(base_url=base_url, **{"api_key": "test-key", **FAST, **options})
        try:
            return await model.complete(request or _request())
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def _failure(base_url: str, request: ChatRequest | None = None, **options: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _complete(base_url, request, **options)
    return caught.value


def test_a_text_reply_comes_back_with_usage_model_finish_reason_and_id(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "Final Answer: 42"}], tmp_path) as server:
        reply = _complete(server.base_url)
    assert reply == ChatReply(
        content="Final Answer: 42",
        usage=Usage(input_tokens=10, output_tokens=5),
        model="test-model",
        finish_reason="stop",
        response_id="chatcmpl-1",
    )


def test_tool_calls_come_back_with_their_ids_names_and_arguments_text(tmp_path: Path) -> None:
    replies = [{"tool_calls": [{"name": "search", "arguments": {"query": "deploy tokens"}}, {"name": "now"}]}]
    with ScriptedModelServer(replies, tmp_path) as server:
        reply = _complete(server.base_url)
    assert reply.content == ""  # the server sends null
    assert reply.tool_calls == (
        ToolCallRequest(id="call_1_0", name="search", arguments='{"query": "deploy tokens"}'),
        ToolCallRequest(id="call_1_1", name="now", arguments="{}"),
    )
    assert reply.finish_reason == "tool_calls"


def test_the_request_carries_model_messages_tools_and_params_with_top_k_as_an_extra_field(tmp_path: Path) -> None:
    tool = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    request = ChatRequest(
        model="qwen2.5-7b",
        messages=({"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}),
        tools=(tool,),
        params={"temperature": 0.2, "top_p": 0.9, "top_k": 40, "max_tokens": 100, "stop": ["END"]},
        timeout=5,
        agent="support/triage",
    )
    with ScriptedModelServer([{"content": "ok"}], tmp_path) as server:
        _complete(server.base_url, request)
        (body,) = server.requests()
    assert body["model"] == "qwen2.5-7b"
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert body["tools"] == [tool]
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.2, 0.9, 40)
    assert (body["max_tokens"], body["stop"]) == (100, ["END"])
    # Tools always go with a tool_choice: llama.cpp's server drops them otherwise.
    assert body["tool_choice"] == "auto" and "agent" not in body


def test_a_request_without_tools_or_params_sends_none(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok"}], tmp_path) as server:
        _complete(server.base_url)
        (body,) = server.requests()
    assert set(body) == {"model", "messages"}


def test_a_500_is_retried_and_the_retry_answers(tmp_path: Path) -> None:
    with ScriptedModelServer([{"status": 500}, {"content": "after a retry"}], tmp_path) as server:
        reply = _complete(server.base_url)
        assert len(server.requests()) == 2
    assert reply.content == "after a retry"


def test_a_500_forever_fails_after_the_retries_with_the_endpoints_message(tmp_path: Path) -> None:
    with ScriptedModelServer([{"status": 500, "repeat": True}], tmp_path) as server:
        error = _failure(server.base_url, max_retries=2)
        assert len(server.requests()) == 3
    assert (error.reason, error.http_status) == ("status", 500)
    assert str(error) == "the model endpoint answered 500 Internal Server Error after 2 retries: scripted 500"


def test_a_400_is_not_retried(tmp_path: Path) -> None:
    with ScriptedModelServer([{"status": 400}, {"content": "never asked for"}], tmp_path) as server:
        error = _failure(server.base_url)
        assert len(server.requests()) == 1
    assert (error.reason, error.http_status) == ("status", 400)
    assert str(error) == "the model endpoint answered 400 Bad Request: scripted 400"


def test_no_retries_means_one_attempt(tmp_path: Path) -> None:
    with ScriptedModelServer([{"status": 503, "repeat": True}], tmp_path) as server:
        error = _failure(server.base_url, max_retries=0)
        assert len(server.requests()) == 1
    assert str(error) == "the model endpoint answered 503 Service Unavailable: scripted 503"


def test_a_429_waits_the_seconds_retry_after_asks_for() -> None:
    answers = [
        Answer(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "1"}),
        Answer(200, completion_body("ok")),
    ]
    with HeaderServer(answers) as server:
        reply = _complete(server.base_url, max_backoff=1.0)
        (first, _), (second, _) = server.received
    assert reply.content == "ok"
    # The retry came after the adapter's own sleep of the second asked for
    # (a sleep never ends early): a lower bound that cannot flake. How long
    # it waits, exactly, is tests/providers/test_transport.py's to check.
    assert second - first >= 0.9


def test_a_retry_after_date_is_honoured() -> None:
    moment = int(time.time()) + 3
    # The date on the server's monotonic clock, or earlier: a pause between
    # the two readings can only move it earlier.
    now = time.monotonic()
    date = moment - time.time() + now
    answers = [Answer(503, b"busy", {"Retry-After": email.utils.formatdate(moment, usegmt=True)})]
    answers.append(Answer(200, completion_body("ok")))
    with HeaderServer(answers) as server:
        assert _complete(server.base_url, max_backoff=1.0).content == "ok"
        _, (second, _) = server.received
    # The retry did not come before the date, however late the first answer
    # was read (the backoff alone would have retried within 0.01 s). The
    # slack is the clocks' (the wall clock may be slewed by 0.05 %), not the
    # machine's. How long it waits, exactly, is test_transport.py's to check.
    assert second >= date - 0.01


@pytest.mark.parametrize("value", ["1.5", "-1", "1e3"])
def test_a_retry_after_rfc_9110_does_not_allow_is_ignored_for_the_backoff(value: str) -> None:
    answers = [Answer(429, b"{}", {"Retry-After": value}), Answer(200, completion_body("ok"))]
    with HeaderServer(answers) as server:
        assert _complete(server.base_url, backoff=0.3, max_backoff=1.0).content == "ok"
        (first, _), (second, _) = server.received
    # Retried after the backoff's first delay, 0.15 to 0.3 s: not at once, as
    # "-1" read as no wait would. That the delay is the backoff's, not 1.5 s
    # nor 1000 s capped to 4, is tests/providers/test_transport.py's to check.
    assert second - first >= 0.1


def test_a_long_retry_after_is_capped() -> None:
    answers = [Answer(429, b"{}", {"Retry-After": "3600"}), Answer(200, completion_body("ok"))]

    async def scenario(base_url: str) -> ChatReply:
        model = OpenAIChatModel(base_url=base_url, api_key="test-key", backoff=0.01, max_backoff=0.1)
        try:
            # An hour, uncapped: a call that waited for it fails here instead
            # (LATE is a bound only a hung call reaches; capped, it is 0.4 s).
            return await asyncio.wait_for(model.complete(_request()), LATE)
        finally:
            await model.aclose()

    with HeaderServer(answers) as server:
        assert asyncio.run(scenario(server.base_url)).content == "ok"
        assert len(server.received) == 2


def test_a_429_that_never_ends_names_the_retries_and_the_message() -> None:
    body = b'{"error": {"message": "rate limit reached for requests", "type": "requests"}}'
    with HeaderServer([Answer(429, body)] * 2) as server:
        error = _failure(server.base_url, max_retries=1)
        assert len(server.received) == 2
    assert (
        str(error) == "the model endpoint answered 429 Too Many Requests after 1 retry: rate limit reached for requests"
    )


def test_an_error_message_is_cut_to_200_characters_on_one_line() -> None:
    body = b'{"detail": "' + b"line\\nbreak " * 50 + b'"}'
    with HeaderServer([Answer(422, body)]) as server:
        error = _failure(server.base_url)
    message = str(error).split(": ", 1)[1]
    assert message.startswith("line break line break") and len(message) == 203 and "\n" not in message


def test_a_slow_endpoint_times_out_with_the_requests_timeout(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "late", "delay": LATE}, {"content": "never"}], tmp_path) as server:
        error = _failure(server.base_url, _request(timeout=0.5))
        assert len(server.requests()) == 1  # a timeout is not retried
        # The client gave up before the server answered: a client that
        # waited for the answer would have got "late" and no error at all.
        assert server.endings() == []
    assert error.reason == "timeout"
    assert str(error) == "the model endpoint did not answer within 0.5 s"


def test_the_default_timeout_applies_when_the_request_has_none(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "late", "delay": LATE}], tmp_path) as server:
        error = _failure(server.base_url, default_timeout=0.3)
        assert server.endings() == []  # given up on before the answer
    assert str(error) == "the model endpoint did not answer within 0.3 s"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("{not json", "it is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        ("", "it is not JSON (Expecting value: line 1 column 1 (char 0))"),
        ('"a string"', "it is a JSON str, not an object"),
        ('{"id": "chatcmpl-1", "object": "chat.completion"}', "it has no choices"),
        ('{"choices": []}', "it has no choices"),
        ('{"choices": [{"index": 0}]}', "its first choice has no message"),
        ('{"choices": [{"message": {"content": 5}}]}', "its message content is not text"),
        ('{"choices": [{"message": {"tool_calls": [{"id": "c"}]}}]}', "a tool call has no function"),
    ],
)
def test_a_body_that_is_not_a_chat_completion_is_malformed(raw: str, why: str, tmp_path: Path) -> None:
    with ScriptedModelServer([{"raw": raw}], tmp_path) as server:
        error = _failure(server.base_url)
    assert error.reason == "malformed"
    assert str(error) == f"the model endpoint's reply is not a chat completion: {why}"


def _failure_and_peak_memory(base_url: str, **options: Any) -> tuple[ModelError, int]:
    """The error of a second call to a fresh model, and the most memory
    Python held during it: the first call, answered in full, imports and
    caches what the SDK loads on first use, which is no reply's cost."""

    async def scenario() -> tuple[ModelError, int]:
        model = OpenAIChatModel(base_url=base_url, api_key="test-key", **options)
        try:
            await model.complete(_request())
            tracemalloc.start()
            try:
                with pytest.raises(ModelError) as caught:
                    await model.complete(_request())
                return caught.value, tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def test_a_10_mb_reply_is_refused_by_its_length_without_being_read(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "warm-up"}, {"content": "x" * (10 * MB)}], tmp_path) as server:
        error, peak = _failure_and_peak_memory(server.base_url)
    assert error.reason == "too-large"
    assert str(error) == "the model's reply is over 4 MiB; the rest was not read"
    assert peak < MB


def test_a_10_mb_reply_with_no_length_is_read_only_up_to_the_cap() -> None:
    answers = [Answer(200, completion_body("warm-up")), Answer(200, b"x" * 65536, repeat=160, sized=False)]
    with HeaderServer(answers) as server:
        error, peak = _failure_and_peak_memory(server.base_url)
    assert error.reason == "too-large"
    assert str(error) == "the model's reply is over 4 MiB; the rest was not read"
    # 4 MiB kept (4.2 MB) and a chunk, not 10 MB.
    assert peak < 6 * MB


def test_a_smaller_cap_is_kept_as_well() -> None:
    answers = [Answer(200, completion_body("warm-up")), Answer(200, b"x" * 65536, repeat=160, sized=False)]
    with HeaderServer(answers) as server:
        error, peak = _failure_and_peak_memory(server.base_url, max_reply_bytes=1024 * 1024)
    assert str(error) == "the model's reply is over 1 MiB; the rest was not read"
    assert peak < 2 * MB


def test_a_reply_within_the_cap_is_read() -> None:
    body = completion_body("y" * 5000)
    with HeaderServer([Answer(200, body, sized=False)]) as server:
        assert _complete(server.base_url, max_reply_bytes=len(body)).content == "y" * 5000


def test_an_uncompressed_reply_is_asked_for_and_a_compressed_one_refused() -> None:
    with HeaderServer([Answer(200, b"\x1f\x8b...", {"Content-Encoding": "gzip"})]) as server:
        error = _failure(server.base_url)
        ((_, headers),) = server.received
    assert headers["Accept-Encoding"] == "identity"
    assert error.reason == "malformed"
    assert "compressed (gzip)" in str(error)


def test_nothing_listening_is_a_connection_error() -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    error = _failure(base_url)
    assert error.reason == "connection"
    assert str(error).startswith(f"the connection to the model endpoint {base_url} failed: ")


def test_the_description_names_the_kind_and_the_endpoint_and_openai_is_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The SDK would read it; the model is given its settings, by the command line.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://elsewhere/v1")

    async def scenario() -> list[tuple[str, str]]:
        models = [
            OpenAIChatModel(base_url="http://vllm:8000/v1", api_key=None),
            OpenAIChatModel(base_url=None, api_key=None),
            OpenAIChatModel(base_url="https://api.openai.com/v1"),
            OpenAIChatModel(base_url="http://127.0.0.1:18000/v1", server="llama.cpp"),
            OpenAIChatModel(base_url="https://res.openai.azure.com", kind="azure_openai", api_version="2024-10-21"),
        ]
        for model in models:
            await model.aclose()
        return [(model.kind, model.description) for model in models]

    assert asyncio.run(scenario()) == [
        ("openai_compatible", "openai_compatible http://vllm:8000/v1"),
        ("openai", "openai https://api.openai.com/v1"),
        ("openai", "openai https://api.openai.com/v1"),
        ("openai_compatible", "openai_compatible (llama.cpp) http://127.0.0.1:18000/v1"),
        ("azure_openai", "azure_openai https://res.openai.azure.com"),
    ]


def test_without_a_key_a_placeholder_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-the-environment")
    answers = [Answer(200, completion_body("ok"))]
    with HeaderServer(answers) as server:
        _complete(server.base_url, api_key=None)
        ((_, headers),) = server.received
    assert headers["Authorization"] == "Bearer not-set"


def test_concurrent_calls_share_one_model(tmp_path: Path) -> None:
    replies = [{"when": f"question {n}$", "content": f"answer {n}"} for n in range(8)]

    async def scenario(base_url: str) -> list[str]:
        model = OpenAIChatModel(base_url=base_url, api_key="k")
        try:
            answers = await asyncio.gather(*(model.complete(_request(f"question {n}")) for n in range(8)))
        finally:
            await model.aclose()
        return [answer.content for answer in answers]

    with ScriptedModelServer(replies, tmp_path) as server:
        assert asyncio.run(scenario(server.base_url)) == [f"answer {n}" for n in range(8)]


def test_max_concurrency_holds_calls_back_within_their_timeout(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"when": "slow", "content": "slow", "delay": 2}]
    replies.append({"when": "quick", "content": "quick"})

    async def scenario(base_url: str) -> tuple[ChatReply | BaseException, ...]:
        model = OpenAIChatModel(base_url=base_url, api_key="k", max_concurrency=1)
        try:
            slow = asyncio.create_task(model.complete(_request("slow")))
            await asyncio.sleep(0.2)
            return tuple(
                await asyncio.gather(slow, model.complete(_request("quick", timeout=0.5)), return_exceptions=True)
            )
        finally:
            await model.aclose()

    with ScriptedModelServer(replies, tmp_path) as server:
        slow, quick = asyncio.run(scenario(server.base_url))
        sent = server.requests()
    assert isinstance(slow, ChatReply) and slow.content == "slow"
    assert isinstance(quick, ModelError) and quick.reason == "timeout"
    assert str(quick) == "the model endpoint did not answer within 0.5 s: every connection allowed was busy"
    assert [body["messages"][0]["content"] for body in sent] == ["slow"]  # the second was never sent
