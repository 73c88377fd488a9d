"""Reading what a Chat Completions endpoint streamed: deltas assembled into
one reply, tool calls from their pieces, and every shape the API does not
document refused."""

from __future__ import annotations

from typing import Any

import pytest

from registry.errors import ModelError
from registry.providers.chat import ChatReply, ToolCallRequest, Usage
from registry.providers.openai_reply import StreamAssembler


def _delta(delta: dict[str, Any], finish: str | None = None, **head: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-7",
        "model": "m",
        **head,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _assembled(*chunks: Any) -> tuple[list[str], ChatReply]:
    assembler = StreamAssembler()
    pieces = [assembler.add(chunk) for chunk in chunks]
    return [piece for piece in pieces if piece], assembler.reply()


def test_text_deltas_join_into_the_reply_with_the_usage_chunk_that_follows() -> None:
    pieces, reply = _assembled(
        _delta({"role": "assistant", "content": ""}),
        _delta({"content": "Hel"}),
        _delta({"content": "lo"}),
        _delta({}, "stop"),
        {"id": "chatcmpl-7", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    )
    assert pieces == ["Hel", "lo"]
    assert reply == ChatReply(
        content="Hello", usage=Usage(3, 2), model="m", finish_reason="stop", response_id="chatcmpl-7"
    )


def test_tool_calls_are_assembled_by_index_from_their_pieces() -> None:
    first = {"index": 0, "id": "c0", "type": "function", "function": {"name": "search", "arguments": ""}}
    second = {"index": 1, "id": "c1", "type": "function", "function": {"name": "now", "arguments": ""}}
    pieces, reply = _assembled(
        _delta({"tool_calls": [first]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": '}}]}),
        _delta({"tool_calls": [second]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
        _delta({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        _delta({}, "tool_calls"),
    )
    assert pieces == []
    assert reply.tool_calls == (ToolCallRequest("c0", "search", '{"query": "x"}'), ToolCallRequest("c1", "now", "{}"))


def test_a_name_and_id_repeated_in_every_delta_as_llama_cpp_does_are_kept_once() -> None:
    def piece(arguments: str) -> dict[str, Any]:
        call = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "f", "arguments": arguments}}
        return _delta({"role": None, "content": None, "tool_calls": [call]})

    _, reply = _assembled(piece('{"'), piece("city"), piece('": "Paris"}'), _delta({"tool_calls": None}, "tool_calls"))
    assert reply.tool_calls == (ToolCallRequest("call_0", "f", '{"city": "Paris"}'),)


def test_a_stream_that_ends_without_a_finish_reason_was_cut() -> None:
    assembler = StreamAssembler()
    assembler.add(_delta({"content": "Half a rep"}))
    with pytest.raises(ModelError) as caught:
        assembler.reply()
    assert caught.value.reason == "connection"
    assert str(caught.value) == (
        "the model endpoint's stream ended before the reply did (10 characters came, and no finish_reason)"
    )


@pytest.mark.parametrize(
    ("chunk", "why"),
    [
        ([1, 2], "a streamed chunk is a JSON list, not an object"),
        ("text", "a streamed chunk is a JSON str, not an object"),
        ({"choices": "x"}, "a streamed chunk's choices is not a list"),
        ({"choices": ["x"]}, "a streamed choice is not an object"),
        ({"choices": [{"delta": "x"}]}, "a streamed choice's delta is not an object"),
        ({"choices": [{"delta": {"content": 5}}]}, "a streamed delta's content is not text"),
        ({"choices": [{"delta": {"tool_calls": {}}}]}, "a streamed delta's tool_calls is not a list"),
        ({"choices": [{"delta": {"tool_calls": ["x"]}}]}, "a streamed tool call is not an object with a function"),
        ({"choices": [{"delta": {"tool_calls": [{"index": "0"}]}}]}, "a streamed tool call's index is not a number"),
        (
            {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": 5}}]}}]},
            "a streamed tool call's id, name or arguments is not text",
        ),
    ],
)
def test_a_chunk_of_the_wrong_shape_is_malformed(chunk: Any, why: str) -> None:
    with pytest.raises(ModelError) as caught:
        StreamAssembler().add(chunk)
    assert caught.value.reason == "malformed"
    assert str(caught.value) == f"the model endpoint's reply is not a chat completion: {why}"


def test_a_tool_call_that_never_got_its_name_is_malformed() -> None:
    assembler = StreamAssembler()
    assembler.add(_delta({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": "{}"}}]}, "tool_calls"))
    with pytest.raises(ModelError) as caught:
        assembler.reply()
    assert str(caught.value).endswith("streamed tool call 0 came without its id or name")


def test_choices_other_than_the_first_are_not_mixed_in() -> None:
    other = {"index": 1, "delta": {"content": "other"}, "finish_reason": None}
    pieces, reply = _assembled({"choices": [{"index": 0, "delta": {"content": "mine"}}, other]}, _delta({}, "stop"))
    assert (pieces, reply.content) == (["mine"], "mine")
