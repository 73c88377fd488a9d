"""Claude through the official ``anthropic`` SDK, against the scripted
Messages API server (tests/support/anthropic_server.py) as its own process:
the translation as the server checks it, retries, streaming, cancelling,
and every hostile reply."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from registry.errors import ModelError
from registry.providers.chat import (
    Adjustment,
    ChatReply,
    ChatRequest,
    ResponseFormat,
    StreamItem,
    TextDelta,
    ToolCallRequest,
    Usage,
)
from tests.support.anthropic_server import AnthropicServer
from tests.support.ports import free_port

if TYPE_CHECKING:
    from registry.providers.anthropic_chat import AnthropicChatModel

KEY = "sk-ant-test-3f9c2a7e51"
FAST = {"backoff": 0.01, "max_backoff": 0.05}
MB = 1000 * 1000
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches the docs.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
LABEL = {"type": "object", "required": ["label"], "properties": {"label": {"type": "string"}}}


def _request(text: str = "hello", **fields: Any) -> ChatRequest:
    return ChatRequest(model="claude-test", messages=({"role": "user", "content": text},), **fields)


def _anthropic(**options: Any) -> AnthropicChatModel:
    # Imported here, not at the top: the anthropic SDK's import is seconds of CPU,
    # which every pytest worker would otherwise pay while collecting, running this module or not.
    from registry.providers.anthropic_chat import AnthropicChatModel

    return AnthropicChatModel(**options)


def _model(base_url: str, **options: Any) -> AnthropicChatModel:
    return _anthropic(**{"api_key": KEY, "base_url": base_url, **FAST, **options})


def _complete(server: AnthropicServer, request: ChatRequest | None = None, **options: Any) -> ChatReply:
    async def scenario() -> ChatReply:
        model = _model(server.base_url, **options)
        try:
            return await model.complete(request or _request())
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def _streamed(server: AnthropicServer, request: ChatRequest | None = None, **options: Any) -> list[StreamItem]:
    async def scenario() -> list[StreamItem]:
        model = _model(server.base_url, **options)
        try:
            return [item async for item in model.stream(request or _request())]
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def _failure(
    server: AnthropicServer, request: ChatRequest | None = None, *, stream: bool = False, **options: Any
) -> ModelError:
    with pytest.raises(ModelError) as caught:
        (_streamed if stream else _complete)(server, request, **options)
    return caught.value


# --- replies and requests ------------------------------------------------------------------------


def test_a_text_reply_comes_back_with_usage_model_finish_reason_and_id(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "Final Answer: 42"}], tmp_path) as server:
        reply = _complete(server)
    assert reply == ChatReply(
        content="Final Answer: 42",
        usage=Usage(input_tokens=10, output_tokens=5),
        model="claude-test",
        finish_reason="stop",
        response_id="msg_1",
    )


def test_the_request_carries_the_translation_with_the_key_and_the_api_version(tmp_path: Path) -> None:
    request = ChatRequest(
        model="claude-test",
        messages=(
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Find the docs on deploy tokens."},
        ),
        tools=(SEARCH,),
        tool_choice="auto",
        params={"max_tokens": 300, "stop": ["END"], "temperature": 0.2, "top_p": 0.9, "top_k": 40},
        timeout=5,
        agent="support/triage",
    )
    with AnthropicServer([{"content": "ok"}], tmp_path) as server:
        _complete(server, request)
        (entry,) = server.entries()
    assert entry["path"] == "/v1/messages"
    assert entry["headers"]["authorization"] == f"Bearer {KEY}"
    assert entry["headers"]["anthropic-version"] == "2026-10-21"
    assert entry["body"] == {
        "model": "claude-test",
        "max_tokens": 300,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Find the docs on deploy tokens."}]}],
        "tools": [
            {
                "name": "search",
                "description": "Searches the docs.",
                "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
            }
        ],
        "tool_choice": {"type": "auto"},
        "stop_sequences": ["END"],
        "stream": False,
    }


def test_max_tokens_is_the_default_when_the_definition_sets_none(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "ok", "repeat": True}], tmp_path) as server:
        _complete(server)
        _complete(server, default_max_tokens=123)
        assert [body["max_tokens"] for body in server.requests()] == [4096, 123]


def test_a_tool_loop_the_api_would_check_is_accepted(tmp_path: Path) -> None:
    calls = [
        {"id": "toolu_a", "type": "function", "function": {"name": "search", "arguments": '{"query": "a"}'}},
        {"id": "toolu_b", "type": "function", "function": {"name": "search", "arguments": "{broken"}},
    ]
    request = ChatRequest(
        model="claude-test",
        messages=(
            {"role": "system", "content": "Use the tools."},
            {"role": "assistant", "content": "How can I help?"},
            {"role": "user", "content": "Find a and b."},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "toolu_a", "content": "a: found"},
            {"role": "tool", "tool_call_id": "toolu_b", "content": "Error: the arguments are not JSON"},
            {"role": "user", "content": "Summarise."},
        ),
        tools=(SEARCH,),
        tool_choice="auto",
    )
    with AnthropicServer([{"when": "Summarise", "content": "Both found."}], tmp_path) as server:
        assert _complete(server, request).content == "Both found."
        (body,) = server.requests()
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][3]["content"][1]["input"] == {"_raw": "{broken"}
    assert [block["type"] for block in body["messages"][4]["content"]] == ["tool_result", "tool_result", "text"]


def test_a_tool_result_for_no_tool_use_is_refused_as_the_api_refuses_it(tmp_path: Path) -> None:
    request = ChatRequest(
        model="claude-test",
        messages=({"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "toolu_x", "content": "?"}),
    )
    with AnthropicServer([{"content": "never"}], tmp_path) as server:
        error = _failure(server, request)
        assert len(server.requests()) == 1  # a 400 is not retried
    assert (error.reason, error.http_status) == ("status", 400)
    assert "unexpected tool_use_id found in tool_result blocks: toolu_x" in str(error)


def test_tool_calls_come_back_with_their_ids_names_and_arguments_text(tmp_path: Path) -> None:
    replies = [{"tool_calls": [{"name": "search", "arguments": {"query": "deploy tokens"}}, {"name": "now"}]}]
    with AnthropicServer(replies, tmp_path) as server:
        reply = _complete(server, _request(tools=(SEARCH,), tool_choice="auto"))
    assert reply.content == ""
    assert reply.tool_calls == (
        ToolCallRequest(id="toolu_1_0", name="search", arguments='{"query": "deploy tokens"}'),
        ToolCallRequest(id="toolu_1_1", name="now", arguments="{}"),
    )
    assert reply.finish_reason == "tool_calls"


def test_a_reply_calling_a_tool_that_was_not_offered_comes_back_as_asked(tmp_path: Path) -> None:
    # The executor answers it with an error observation (test_anthropic_library).
    with AnthropicServer([{"tool_calls": [{"name": "drop_database", "arguments": {}}]}], tmp_path) as server:
        reply = _complete(server, _request(tools=(SEARCH,), tool_choice="auto"))
    assert [call.name for call in reply.tool_calls] == ["drop_database"]


def test_a_reply_naming_another_model_says_so(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "hi", "model": "claude-other-20991231"}], tmp_path) as server:
        assert _complete(server).model == "claude-other-20991231"


def test_structured_output_is_a_forced_tool_whose_input_is_the_content(tmp_path: Path) -> None:
    request = _request("Classify: refund please", response_format=ResponseFormat(LABEL, "label"))
    replies = [{"tool_calls": [{"name": "label", "arguments": {"label": "billing"}}], "repeat": True}]
    with AnthropicServer(replies, tmp_path) as server:
        whole = _complete(server, request)
        streamed = _streamed(server, request)
        body = server.requests()[0]
    assert body["tool_choice"] == {"type": "tool", "name": "label"}
    assert body["tools"][0]["input_schema"] == LABEL
    assert (json.loads(whole.content), whole.tool_calls, whole.finish_reason) == ({"label": "billing"}, (), "stop")
    assert streamed[:-1] == [TextDelta(whole.content)]
    assert cast(ChatReply, streamed[-1]).content == whole.content
    # Both say what was sent for the schema asked for.
    forced = (Adjustment("response_format", "response_format was sent as the tool label, forced"),)
    assert whole.adjustments == cast(ChatReply, streamed[-1]).adjustments == forced


# --- retries and errors --------------------------------------------------------------------------


def test_a_429_waits_the_seconds_retry_after_asks_for(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"status": 429, "headers": {"retry-after": "1"}, "message": "slow down"},
        {"content": "ok"},
    ]
    with AnthropicServer(replies, tmp_path) as server:
        assert _complete(server, max_backoff=1.0).content == "ok"
        first, second = server.entries()
    # At least the second asked for (the backoff alone would be 0.01 s). A
    # lower bound on the adapter's own sleep, which never ends early, cannot
    # flake; how long it waits, exactly, is test_transport.py's to check.
    assert second["at"] - first["at"] >= 0.9


def test_529_overloaded_is_retried_and_the_retry_answers(tmp_path: Path) -> None:
    with AnthropicServer([{"status": 529}, {"content": "after a retry"}], tmp_path) as server:
        assert _complete(server).content == "after a retry"
        assert len(server.requests()) == 2


def test_529_forever_fails_after_the_retries_with_anthropics_message(tmp_path: Path) -> None:
    replies = [{"status": 529, "message": "Overloaded", "repeat": True}]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(server, max_retries=2)
        assert len(server.requests()) == 3
    assert (error.reason, error.http_status) == ("status", 529)
    assert str(error) == "the model endpoint answered 529 Overloaded after 2 retries: Overloaded"


def test_a_400_is_not_retried(tmp_path: Path) -> None:
    with AnthropicServer([{"status": 400, "message": "bad"}, {"content": "never"}], tmp_path) as server:
        error = _failure(server)
        assert len(server.requests()) == 1
    assert str(error) == "the model endpoint answered 400 Bad Request: bad"


def test_a_slow_endpoint_times_out_with_the_requests_timeout_and_is_not_retried(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "late", "delay": 3}, {"content": "never"}], tmp_path) as server:
        error = _failure(server, _request(timeout=0.5))
        assert len(server.requests()) == 1
    assert (error.reason, str(error)) == ("timeout", "the model endpoint did not answer within 0.5 s")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("{not json", "it is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        ("[]", "it is a JSON list, not an object"),
        ('{"type": "message", "content": null}', "it has no content list"),
        (
            '{"content": [{"type": "tool_use", "id": "t", "name": "s", "input": "x"}]}',
            "the input of tool_use 's' is not an object",
        ),
    ],
)
def test_a_body_that_is_not_a_message_is_malformed(raw: str, why: str, tmp_path: Path) -> None:
    with AnthropicServer([{"raw": raw}], tmp_path) as server:
        error = _failure(server)
    assert error.reason == "malformed"
    assert str(error) == f"the model endpoint's reply is not a Messages API message: {why}"


def test_nothing_listening_is_a_connection_error() -> None:
    base_url = f"http://127.0.0.1:{free_port()}"

    async def scenario() -> ModelError:
        model = _model(base_url)
        try:
            with pytest.raises(ModelError) as caught:
                await model.complete(_request())
            return caught.value
        finally:
            await model.aclose()

    error = asyncio.run(scenario())
    assert error.reason == "connection"
    assert str(error).startswith(f"the connection to the model endpoint {base_url} failed: ")


def test_the_key_never_appears_in_an_error_even_when_the_server_echoes_it(tmp_path: Path) -> None:
    replies = [{"status": 401, "error_type": "authentication_error", "message": f"invalid x-api-key {KEY}"}]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(server)
    assert str(error) == "the model endpoint answered 401 Unauthorized: invalid x-api-key [redacted]"
    assert KEY not in repr(error) and KEY not in repr(error.args)


# --- streaming -------------------------------------------------------------------------------


def test_a_stream_gives_the_text_delta_by_delta_then_the_whole_reply(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "Deploy tokens are read-only."}], tmp_path) as server:
        items = _streamed(server)
        (body,) = server.requests()
    *deltas, reply = items
    assert body["stream"] is True
    assert [cast(TextDelta, d).text for d in deltas] == ["Deploy t", "okens ar", "e read-o", "nly."]
    assert reply == ChatReply(
        "Deploy tokens are read-only.",
        usage=Usage(10, 5),
        model="claude-test",
        finish_reason="stop",
        response_id="msg_1",
    )


def test_a_streamed_tool_use_is_assembled(tmp_path: Path) -> None:
    replies = [{"content": "Searching.", "tool_calls": [{"name": "search", "arguments": {"query": "tokens"}}]}]
    with AnthropicServer(replies, tmp_path) as server:
        *deltas, reply = _streamed(server, _request(tools=(SEARCH,), tool_choice="auto"))
    assert "".join(cast(TextDelta, d).text for d in deltas) == "Searching."
    assert cast(ChatReply, reply).tool_calls == (ToolCallRequest("toolu_1_0", "search", '{"query": "tokens"}'),)


def test_a_stream_that_opens_on_529_is_retried(tmp_path: Path) -> None:
    with AnthropicServer([{"status": 529}, {"content": "after a retry"}], tmp_path) as server:
        assert cast(ChatReply, _streamed(server)[-1]).content == "after a retry"


def test_an_overloaded_error_in_the_middle_of_a_stream_ends_it_unretried(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {
            "content": "partial answer",
            "stream_error": {"type": "overloaded_error", "message": "Overloaded"},
            "error_after": 4,
        },
        {"content": "never"},
    ]
    with AnthropicServer(replies, tmp_path) as server:
        error = _failure(server, stream=True)
        assert len(server.requests()) == 1
    assert (error.reason, error.http_status) == ("status", 529)
    assert str(error) == "the model endpoint's stream ended with an error: overloaded_error: Overloaded"


def test_a_stream_cut_mid_reply_ended_early(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "a reply cut in the middle", "cut_after": 4}], tmp_path) as server:
        error = _failure(server, stream=True)
    assert error.reason == "connection"
    assert str(error).startswith("the model endpoint's stream ended early: ")


def test_a_stream_that_ends_before_message_stop_ended_early(tmp_path: Path) -> None:
    with AnthropicServer([{"content": "a reply that stops short", "end_after": 4}], tmp_path) as server:
        error = _failure(server, stream=True)
    assert (error.reason, str(error)) == ("connection", "the model endpoint's stream ended early, before message_stop")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (
            "event: message_start\ndata: {not json\n\n",
            "the model endpoint's stream is not a Messages API stream: an event is not JSON"
            " (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        (
            'event: message_start\ndata: {"type": "message_start"}\n\n',
            "the model endpoint's reply is not a Messages API message: message_start has no message",
        ),
        (
            'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {}}\n\n',
            "the model endpoint's reply is not a Messages API message: content_block_delta 0 has no delta or no block started",
        ),
    ],
)
def test_malformed_server_sent_events_are_malformed(raw: str, why: str, tmp_path: Path) -> None:
    with AnthropicServer([{"raw": raw}], tmp_path) as server:
        error = _failure(server, stream=True)
    assert (error.reason, str(error)) == ("malformed", why)


def _failure_and_peak_memory(base_url: str, *, stream: bool) -> tuple[ModelError, int]:
    """The error of a second call to a fresh model, and the most memory
    Python held during it (the first call loads what the SDK loads once)."""

    async def call(model: AnthropicChatModel, text: str) -> object:
        if stream:
            return [item async for item in model.stream(_request(text))]
        return await model.complete(_request(text))

    async def scenario() -> tuple[ModelError, int]:
        model = _model(base_url)
        try:
            await call(model, "warm-up")
            tracemalloc.start()
            try:
                with pytest.raises(ModelError) as caught:
                    await call(model, "big")
                return caught.value, tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        finally:
            await model.aclose()

    return asyncio.run(scenario())


@pytest.mark.parametrize("stream", [False, True])
def test_a_10_mb_reply_is_refused_with_bounded_memory(stream: bool, tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"when": "warm-up", "content": "warm"},
        {"when": "big", "content": "x" * 65536, "content_times": 160},
    ]
    with AnthropicServer(replies, tmp_path) as server:
        error, peak = _failure_and_peak_memory(server.base_url, stream=stream)
    assert error.reason == "too-large"
    assert str(error) == "the model's reply is over 4 MiB; the rest was not read"
    # The non-streamed reply is refused by its length; the stream is read to the cap: 4 MiB, not 10 MB.
    assert peak < (6 if stream else 1) * MB


# --- cancelling and the deadline -----------------------------------------------------------------

SLOW_STREAM = {"content": "word " * 200, "event_delay": 0.05}


def _first_delta_then(server: AnthropicServer, stop: Callable[[AsyncIterator[StreamItem]], Any]) -> StreamItem:
    """Read a stream's first item, then stop reading it the way ``stop`` does."""

    async def scenario() -> StreamItem:
        model = _model(server.base_url)
        try:
            items = model.stream(_request())
            first = await items.__anext__()
            await stop(items)
            return first
        finally:
            await model.aclose()

    return asyncio.run(scenario())


def test_closing_a_stream_closes_the_connection(tmp_path: Path) -> None:
    with AnthropicServer([SLOW_STREAM], tmp_path) as server:
        first = _first_delta_then(server, lambda items: items.aclose())  # type: ignore[attr-defined]
        assert first == TextDelta("word wor")
        assert server.wait_for_disconnect()


def test_cancelling_the_task_reading_a_stream_closes_the_connection(tmp_path: Path) -> None:
    async def cancel(items: AsyncIterator[StreamItem]) -> None:
        async def read_all() -> None:
            async for _ in items:
                pass

        task = asyncio.ensure_future(read_all())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with AnthropicServer([SLOW_STREAM], tmp_path) as server:
        _first_delta_then(server, cancel)
        assert server.wait_for_disconnect()


def test_a_stream_past_its_deadline_times_out_and_closes_the_connection(tmp_path: Path) -> None:
    with AnthropicServer([SLOW_STREAM], tmp_path) as server:
        error = _failure(server, _request(timeout=0.5), stream=True)
        assert server.wait_for_disconnect()
    assert (error.reason, str(error)) == ("timeout", "the model endpoint did not answer within 0.5 s")


# --- concurrency -----------------------------------------------------------------------------


def _most_in_flight(server: AnthropicServer, **options: Any) -> int:
    async def scenario() -> None:
        model = _model(server.base_url, **options)
        try:
            await asyncio.gather(*(model.complete(_request(f"question {n}")) for n in range(4)))
        finally:
            await model.aclose()

    asyncio.run(scenario())
    return max(int(entry["in_flight"]) for entry in server.entries())


def test_max_concurrency_holds_calls_beyond_it(tmp_path: Path) -> None:
    replies = [{"content": "answer", "delay": 0.2, "repeat": True}]
    (tmp_path / "one").mkdir()
    (tmp_path / "unbounded").mkdir()
    with AnthropicServer(replies, tmp_path / "one") as server:
        assert _most_in_flight(server, max_concurrency=1) == 1
    with AnthropicServer(replies, tmp_path / "unbounded") as server:
        assert _most_in_flight(server) > 1


def test_the_description_names_the_platform_and_the_endpoint() -> None:
    async def scenario() -> tuple[str, str | None]:
        model = _anthropic(api_key=KEY, base_url="http://claude.internal:8080/")
        try:
            return model.description, model.binding_problem("anthropic")
        finally:
            await model.aclose()

    assert asyncio.run(scenario()) == ("anthropic http://claude.internal:8080", None)
