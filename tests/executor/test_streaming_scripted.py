"""The scripted model's stream: the reply in pieces, then whole; its
timeout mid-stream; and how its streams were closed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.executor.scripted import ScriptedModel, StreamCounts
from registry.providers.chat import ChatReply, ChatRequest, StreamItem, TextDelta

TEXT = "Open Settings,  then Profile.\nDone "


def _request(*, timeout: float | None = None) -> ChatRequest:
    return ChatRequest(model="m", messages=({"role": "user", "content": "hello"},), timeout=timeout)


def _model(*replies: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel.from_replies(list(replies), source="test")


def _streamed(model: ScriptedModel, request: ChatRequest) -> tuple[list[StreamItem], ModelError | None]:
    """Every item of the stream, and the error that ended it, if one did."""
    items: list[StreamItem] = []

    async def read() -> None:
        async for item in model.stream(request):
            items.append(item)

    try:
        asyncio.run(read())
    except ModelError as exc:
        return items, exc
    return items, None


def test_the_reply_streams_word_by_word_then_whole_as_complete_gives_it() -> None:
    items, error = _streamed(_model({"content": TEXT}), _request())
    assert error is None
    deltas = [item.text for item in items if isinstance(item, TextDelta)]
    assert deltas == ["Open ", "Settings,  ", "then ", "Profile.\n", "Done "]
    completed = asyncio.run(_model({"content": TEXT}).complete(_request()))
    assert items[-1] == completed and isinstance(items[-1], ChatReply)
    assert "".join(deltas) == completed.content


def test_a_reply_with_tool_calls_streams_its_text_then_the_calls() -> None:
    reply = {"content": "Let me look.", "tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}]}
    items, _ = _streamed(_model(reply), _request())
    assert [type(item) for item in items] == [TextDelta, TextDelta, TextDelta, ChatReply]
    last = items[-1]
    assert isinstance(last, ChatReply) and [call.name for call in last.tool_calls] == ["lookup"]


def test_a_scripted_error_ends_the_stream_before_any_text() -> None:
    items, error = _streamed(_model({"error": {"status": 503, "message": "overloaded"}}), _request())
    assert items == [] and error is not None and error.reason == "status"


def test_a_stream_slower_than_the_timeout_ends_mid_reply_with_a_timeout() -> None:
    model = _model({"content": "one two three four five six", "stream_delay": 0.1})
    items, error = _streamed(model, _request(timeout=0.25))
    assert [item.text for item in items if isinstance(item, TextDelta)] == ["one ", "two ", "three "]
    assert error is not None and error.reason == "timeout"
    assert model.stream_counts() == StreamCounts(opened=1, ended=1, closed_early=0)


def test_complete_takes_as_long_as_the_stream_so_it_times_out_alike() -> None:
    model = _model({"content": "one two three four five six", "stream_delay": 0.1})
    with pytest.raises(ModelError) as caught:
        asyncio.run(model.complete(_request(timeout=0.25)))
    assert caught.value.reason == "timeout"


def test_a_reader_that_closes_the_stream_early_is_counted() -> None:
    model = _model({"content": "one two three", "repeat": True})

    async def read(closing_after: int) -> None:
        stream = model.stream(_request())
        async for _ in stream:
            closing_after -= 1
            if closing_after == 0:
                break
        await stream.aclose()  # type: ignore[attr-defined]

    asyncio.run(read(1))
    assert model.stream_counts() == StreamCounts(opened=1, ended=1, closed_early=1)
    asyncio.run(read(4))  # the whole reply read: closing it then is no early close
    assert model.stream_counts() == StreamCounts(opened=2, ended=2, closed_early=1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- content: x\n  stream_delay: -1\n", "replies.yml:2:17: stream_delay must be 0 seconds or more, not -1"),
        (
            "- content: x\n  stream_delay: fast\n",
            "replies.yml:2:17: stream_delay must be a number of seconds, not text",
        ),
        (
            "- content: x\n  stream_dealy: 1\n",
            "replies.yml:2:3: unknown key 'stream_dealy'; did you mean 'stream_delay'?",
        ),
    ],
)
def test_a_bad_stream_delay_is_refused_where_it_is(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "replies.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        ScriptedModel.from_file(path)
    assert str(caught.value).replace(str(path), "replies.yml") == message
