"""The OpenAI adapter's streams, through the official SDK, against the
scripted OpenAI-compatible server as its own process: deltas, tool calls
from their pieces, usage, and every way a stream goes wrong. The server's
log says how each answer ended, which is how a test sees that a cancelled
or timed-out stream closed its connection."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from registry.errors import ModelError
from registry.providers.chat import ChatReply, ChatRequest, StreamItem, TextDelta, ToolCallRequest, Usage
from registry.providers.openai_chat import OpenAIChatModel
from registry.providers.openai_request import NOT_STREAMED
from tests.support.openai_server import ScriptedModelServer

FAST = {"backoff": 0.01, "max_backoff": 0.05}
MB = 1000 * 1000
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
# A reply long enough to be cancelled mid-way: 400 events, 20 ms apart.
ENDLESS = {"content": "x" * 400, "chunk_chars": 1, "delay_between": 0.02}
_T = TypeVar("_T")


def _request(text: str = "hello", **fields: Any) -> ChatRequest:
    return ChatRequest(model="test-model", messages=({"role": "user", "content": text},), **fields)


def _with_model(
    endpoint: ScriptedModelServer, use: Callable[[OpenAIChatModel], Awaitable[_T]], /, **options: Any
) -> _T:
    """``use`` a fresh model of ``endpoint`` (made with ``options``), closed afterwards."""

    async def scenario() -> _T:
        model = OpenAIChatModel(base_url=endpoint.base_url, **{"api_key": "test-key", **FAST, **options})
        try:
            return await use(model)
        finally:
            await model.aclose()

    return asyncio.run(scenario())


async def _everything(model: OpenAIChatModel, request: ChatRequest | None = None) -> list[StreamItem]:
    return [item async for item in model.stream(request or _request())]


def _streamed(endpoint: ScriptedModelServer, request: ChatRequest | None = None, /, **options: Any) -> list[StreamItem]:
    return _with_model(endpoint, lambda model: _everything(model, request), **options)


def _stream_failure(endpoint: ScriptedModelServer, request: ChatRequest | None = None, /, **options: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _streamed(endpoint, request, **options)
    return caught.value


def test_text_streams_as_deltas_then_the_whole_reply_with_its_usage(tmp_path: Path) -> None:
    with ScriptedModelServer([{"chunks": ["Final ", "Answer", ": 42"]}], tmp_path) as server:
        items = _streamed(server)
        (body,) = server.requests()
        assert server.endings() == [("finished", 7)]
    assert items == [
        TextDelta("Final "),
        TextDelta("Answer"),
        TextDelta(": 42"),
        ChatReply(
            content="Final Answer: 42",
            usage=Usage(10, 5),
            model="test-model",
            finish_reason="stop",
            response_id="chatcmpl-1",
        ),
    ]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


def test_streamed_tool_calls_are_assembled_from_their_pieces(tmp_path: Path) -> None:
    replies = [{"tool_calls": [{"name": "search", "arguments": {"query": "deploy tokens"}}, {"name": "now"}]}]
    with ScriptedModelServer(replies, tmp_path) as server:
        *deltas, reply = _streamed(server, _request(tools=(SEARCH,)))
    assert deltas == []
    assert isinstance(reply, ChatReply) and reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCallRequest("call_1_0", "search", '{"query": "deploy tokens"}'),
        ToolCallRequest("call_1_1", "now", "{}"),
    )


def test_llama_cpp_streams_repeat_the_calls_name_and_carry_no_usage(tmp_path: Path) -> None:
    replies = [{"tool_calls": [{"name": "search", "arguments": {"query": "deploy tokens"}}]}]
    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        *_, reply = _streamed(server, _request(tools=(SEARCH,), tool_choice="search"), server="llama.cpp")
        assert server.requests()[0]["stream"] is True
    assert isinstance(reply, ChatReply)
    assert reply.tool_calls == (ToolCallRequest("call_1_0", "search", '{"query": "deploy tokens"}'),)
    assert reply.usage is None


def test_closing_the_stream_early_closes_the_connection_and_the_server_stops(tmp_path: Path) -> None:
    async def two_deltas_then_close(model: OpenAIChatModel) -> list[StreamItem]:
        items = model.stream(_request())
        taken = [await items.__anext__(), await items.__anext__()]
        await items.aclose()
        return taken

    with ScriptedModelServer([ENDLESS], tmp_path) as server:
        taken = _with_model(server, two_deltas_then_close)
        ((ending, events),) = server.wait_for_endings(1)
    assert taken == [TextDelta("x"), TextDelta("x")]
    assert ending == "disconnected" and events < 400


def test_cancelling_the_task_reading_the_stream_closes_the_connection(tmp_path: Path) -> None:
    async def cancelled(model: OpenAIChatModel) -> int:
        seen = 0

        async def read() -> None:
            nonlocal seen
            async for _ in model.stream(_request()):
                seen += 1

        task = asyncio.create_task(read())
        while seen < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    with ScriptedModelServer([ENDLESS], tmp_path) as server:
        assert _with_model(server, cancelled) >= 3
        ((ending, events),) = server.wait_for_endings(1)
    assert ending == "disconnected" and events < 400


def test_a_stream_past_its_timeout_fails_and_closes_the_connection(tmp_path: Path) -> None:
    with ScriptedModelServer([ENDLESS, {"content": "never asked for"}], tmp_path) as server:
        error = _stream_failure(server, _request(timeout=0.3))
        ((ending, events),) = server.wait_for_endings(1)
        assert len(server.requests()) == 1  # a timeout is not retried
    assert (error.reason, str(error)) == ("timeout", "the model endpoint did not answer within 0.3 s")
    assert ending == "disconnected" and events < 400


def test_a_429_with_retry_after_before_the_first_byte_is_retried(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"status": 429, "retry_after": 1}, {"content": "after a retry"}]
    with ScriptedModelServer(replies, tmp_path) as server:
        *_, reply = _streamed(server)
        assert len(server.requests()) == 2
    assert isinstance(reply, ChatReply) and reply.content == "after a retry"


def test_a_stream_cut_mid_reply_is_a_connection_error_and_is_not_retried(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"content": "a reply that never ends", "cut_after": 3}]
    replies.append({"content": "never asked for"})
    with ScriptedModelServer(replies, tmp_path) as server:
        error = _stream_failure(server)
        assert len(server.requests()) == 1
        assert server.endings() == [("cut", 3)]
    assert error.reason == "connection"
    assert str(error).startswith(f"the connection to the model endpoint {server.base_url} failed: ")


def test_a_stream_ended_before_its_finish_reason_is_a_connection_error(tmp_path: Path) -> None:
    # llama.cpp ends a stream with [DONE] when another request waits: the
    # reply stops mid-way without a finish reason. Two requests at once show
    # it (the adapter sends them one at a time unless told otherwise).
    async def two_at_once(model: OpenAIChatModel) -> tuple[list[StreamItem] | BaseException, ChatReply | BaseException]:
        streaming = asyncio.Event()

        async def first() -> list[StreamItem]:
            items = []
            async for item in model.stream(_request("first")):
                streaming.set()
                items.append(item)
            return items

        started = asyncio.create_task(first())
        await streaming.wait()
        second = asyncio.create_task(model.complete(_request("second")))
        return await asyncio.gather(started, second, return_exceptions=True)

    replies: list[dict[str, Any]] = [{"when": "first", **ENDLESS}, {"when": "second", "content": "ok"}]
    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        first, second = _with_model(server, two_at_once, server="llama.cpp", max_concurrency=2)
        assert [ending for ending, _ in server.wait_for_endings(2)] == ["interrupted", "finished"]
    assert isinstance(first, ModelError) and first.reason == "connection"
    assert "stream ended before the reply did" in str(first) and "no finish_reason" in str(first)
    assert isinstance(second, ChatReply) and second.content == "ok"


def test_calls_to_llama_cpp_wait_for_each_other_so_that_none_is_interrupted(tmp_path: Path) -> None:
    async def two_at_once(model: OpenAIChatModel) -> tuple[ChatReply, ChatReply]:
        first = asyncio.create_task(model.complete(_request("first")))
        await asyncio.sleep(0.3)
        return await asyncio.gather(first, model.complete(_request("second")))

    replies: list[dict[str, Any]] = [{"when": "first", "content": "x" * 40, "chunk_chars": 1, "delay_between": 0.02}]
    replies.append({"when": "second", "content": "ok"})
    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        first, second = _with_model(server, two_at_once, server="llama.cpp")
        assert [ending for ending, _ in server.wait_for_endings(2)] == ["finished", "finished"]
    assert (first.content, second.content) == ("x" * 40, "ok")


@pytest.mark.parametrize(
    ("sse", "why"),
    [
        ("data: {not json\n\n", "the model endpoint sent an event that is not JSON (Expecting property name"),
        ("data: [1, 2]\n\n", "the model endpoint's reply is not a chat completion: a streamed chunk is a JSON list"),
        ('data: {"choices": "x"}\n\n', "the model endpoint's reply is not a chat completion: a streamed chunk's"),
        (
            'data: {"choices": [{"index": 0, "delta": {"content": 7}}]}\n\n',
            "the model endpoint's reply is not a chat completion: a streamed delta's content is not text",
        ),
    ],
)
def test_malformed_events_are_malformed(sse: str, why: str, tmp_path: Path) -> None:
    with ScriptedModelServer([{"sse": sse}], tmp_path) as server:
        error = _stream_failure(server)
    assert error.reason == "malformed"
    assert str(error).startswith(why)


def test_an_error_event_mid_stream_is_the_endpoints_error(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "some text first", "error_after": 2}], tmp_path) as server:
        error = _stream_failure(server)
    assert (error.reason, str(error)) == ("status", "the model endpoint reported an error: scripted error mid-stream")


def test_a_10_mb_streamed_reply_is_refused_at_the_cap_in_bounded_memory(tmp_path: Path) -> None:
    async def warm_then_huge(model: OpenAIChatModel) -> tuple[ModelError, int]:
        await _everything(model)  # what the SDK loads on first use is no reply's cost
        tracemalloc.start()
        try:
            with pytest.raises(ModelError) as caught:
                await _everything(model)
            return caught.value, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    replies: list[dict[str, Any]] = [{"content": "warm-up"}, {"content": "x" * (10 * MB), "chunk_chars": 65536}]
    with ScriptedModelServer(replies, tmp_path) as server:
        error, peak = _with_model(server, warm_then_huge, max_reply_bytes=1024 * 1024)
        assert server.wait_for_endings(2)[1][0] == "disconnected"
    assert error.reason == "too-large"
    assert str(error) == "the model's reply is over 1 MiB; the rest was not read"
    # The 1 MiB read (its text kept once more as deltas) and a chunk, not 10 MB.
    assert peak < 4 * MB


def test_a_reply_naming_another_model_says_so_streamed_or_not(tmp_path: Path) -> None:
    replies = [{"content": "ok", "model": "other-name", "repeat": True}]

    async def both(model: OpenAIChatModel) -> tuple[ChatReply, StreamItem]:
        return await model.complete(_request()), (await _everything(model))[-1]

    with ScriptedModelServer(replies, tmp_path) as server:
        whole, streamed = _with_model(server, both)
    assert isinstance(streamed, ChatReply)
    assert (whole.model, streamed.model) == ("other-name", "other-name")


def test_a_call_of_a_tool_not_offered_is_passed_through(tmp_path: Path) -> None:
    replies = [{"tool_calls": [{"name": "rm_rf", "arguments": {}}], "repeat": True}]

    async def both(model: OpenAIChatModel) -> tuple[ChatReply, StreamItem]:
        request = _request(tools=(SEARCH,))
        return await model.complete(request), (await _everything(model, request))[-1]

    with ScriptedModelServer(replies, tmp_path) as server:
        whole, streamed = _with_model(server, both)
    assert isinstance(streamed, ChatReply)
    assert [call.name for call in whole.tool_calls] == [call.name for call in streamed.tool_calls] == ["rm_rf"]


def test_complete_by_streaming_gives_the_reply_complete_gives(tmp_path: Path) -> None:
    replies = [{"content": "Final Answer: 42", "repeat": True}]

    async def both(model: OpenAIChatModel) -> list[ChatReply]:
        whole = await model.complete(_request())
        model.complete_by_streaming = True
        return [whole, await model.complete(_request())]

    with ScriptedModelServer(replies, tmp_path) as server:
        whole, streamed = _with_model(server, both)
        assert [body.get("stream", False) for body in server.requests()] == [False, True]
    assert streamed == ChatReply(
        "Final Answer: 42", usage=Usage(10, 5), model="test-model", finish_reason="stop", response_id="chatcmpl-2"
    )
    assert whole.content == streamed.content


@pytest.mark.parametrize(("by_streaming", "ending"), [(False, "abandoned"), (True, "disconnected")])
def test_a_timed_out_call_to_llama_cpp_stops_it_only_when_streamed(
    by_streaming: bool, ending: str, tmp_path: Path
) -> None:
    # llama.cpp writes a whole reply nobody waits for when it was not
    # streamed; a stream it stops at the next token once the client left.
    slow = {"content": "x" * 60, "chunk_chars": 1, "delay_between": 0.02, "delay": 1.2 if not by_streaming else 0}
    with ScriptedModelServer([slow], tmp_path, flavor="llama.cpp") as server:
        error = _with_model(
            server,
            lambda model: _failure_of(model.complete(_request(timeout=0.5))),
            server="llama.cpp",
            complete_by_streaming=by_streaming,
        )
        ((ended, _),) = server.wait_for_endings(1)
    assert error.reason == "timeout"
    assert ended == ending


def test_llama_cpp_is_completed_by_streaming_unless_told_otherwise(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok", "repeat": True}], tmp_path, flavor="llama.cpp") as server:
        _with_model(server, lambda model: model.complete(_request()), server="llama.cpp")
        _with_model(server, lambda model: model.complete(_request()), server="llama.cpp", complete_by_streaming=False)
        _with_model(server, lambda model: model.complete(_request()), server="vllm")
        assert [body.get("stream", False) for body in server.requests()] == [True, False, False]


async def _failure_of(call: Awaitable[Any]) -> ModelError:
    with pytest.raises(ModelError) as caught:
        await call
    return caught.value


def test_llama_cpp_is_not_asked_to_stream_a_reply_whose_tool_it_chooses(tmp_path: Path) -> None:
    # Its function-calling handler fails such a stream after a 200: the
    # reply comes whole instead, as one delta, complete()'s and stream()'s.
    replies = [{"tool_calls": [{"name": "search", "arguments": {"query": "x"}}], "repeat": True}]

    async def both(model: OpenAIChatModel) -> tuple[ChatReply, list[StreamItem]]:
        request = _request(tools=(SEARCH,))
        return await model.complete(request), await _everything(model, request)

    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server:
        whole, items = _with_model(server, both, server="llama.cpp")
        assert [body.get("stream", False) for body in server.requests()] == [False, False]
    assert [call.name for call in whole.tool_calls] == ["search"]
    (reply,) = items  # no text: the reply alone
    assert isinstance(reply, ChatReply) and reply.tool_calls == (
        ToolCallRequest("call_2_0", "search", '{"query": "x"}'),
    )
    # The stream says it came whole; complete() asked for nothing else.
    assert reply.adjustments == (NOT_STREAMED,)
    assert whole.adjustments == ()
