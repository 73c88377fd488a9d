"""Recording a model's exchanges and replaying them with no model: each
case's calls kept apart by ``exchange_label``, the file the same whatever
order concurrent cases called in, streams recorded whole and replayed as
deltas, ``--repeat`` answered in order, and a request the file lacks
refused with the case, the agent and what differs. The recorded model is
the scripted one; tests/integration/test_recording.py records through the
OpenAI adapter against a real server."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.executor.scripted import ScriptedModel
from registry.providers.chat import ChatReply, ChatRequest, StreamItem, TextDelta
from registry.providers.exchangefile import load_exchanges
from registry.providers.recording import NOT_RECORDED, RecordingChatModel, ReplayChatModel, exchange_label

T = TypeVar("T")

REPLIES: list[dict[str, Any]] = [
    {"when": "refund", "content": "Refund issued.\nAnything else?", "repeat": True},
    {"when": "order", "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}], "repeat": True},
    {"when": "outage", "error": {"status": 503, "message": "overloaded"}, "repeat": True},
    {"content": "A plain answer.", "repeat": True},
]


def _request(text: str, *, agent: str = "support/triage") -> ChatRequest:
    return ChatRequest(
        model="test-model",
        messages=({"role": "system", "content": "You help."}, {"role": "user", "content": text}),
        params={"temperature": 0.2},
        agent=agent,
        timeout=30,
    )


async def _in_case(case: str | None, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` made for ``case``, as the eval runner makes a case's calls."""
    token = exchange_label.set(case)
    try:
        return await call()
    finally:
        exchange_label.reset(token)


async def _streamed(model: RecordingChatModel | ReplayChatModel, request: ChatRequest) -> list[StreamItem]:
    return [item async for item in model.stream(request)]


def _record(path: Path, cases: list[tuple[str, str]]) -> list[ChatReply]:
    """Record ``(case, text)`` calls, all at once, to ``path``."""
    recorder = RecordingChatModel(ScriptedModel.from_replies(REPLIES, source="the test"), path)

    async def run() -> list[ChatReply]:
        try:
            return await asyncio.gather(
                *(_in_case(case, functools.partial(recorder.complete, _request(text))) for case, text in cases)
            )
        finally:
            await recorder.aclose()

    return asyncio.run(run())


CASES = [("refund", "I want a refund"), ("order", "Where is my order?"), ("plain", "Hello")]


def test_a_replay_answers_each_case_what_the_recording_got(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    recorded = _record(path, CASES)
    replay = ReplayChatModel(path)

    async def run() -> list[ChatReply]:
        return [await _in_case(case, functools.partial(replay.complete, _request(text))) for case, text in CASES]

    replayed = asyncio.run(run())
    assert [replace(reply, origin=None) for reply in replayed] == [replace(r, response_id=None) for r in recorded]
    assert {reply.origin for reply in replayed} == {"replay"}
    assert replayed[1].tool_calls[0].name == "lookup_order"


def test_recording_the_same_run_again_writes_the_same_file_whatever_order_the_calls_came_in(tmp_path: Path) -> None:
    many = [(f"{case}-{n}", text) for n in range(5) for case, text in CASES]
    _record(tmp_path / "first.yml", many)
    _record(tmp_path / "second.yml", list(reversed(many)))
    first = (tmp_path / "first.yml").read_bytes()
    assert first == (tmp_path / "second.yml").read_bytes()
    # The scripted model numbers its tool calls in the order it is called; the recorder's ids are the request's.
    ids = re.findall(rb"\bid: (\w+)", first)
    assert len(ids) == 5 and len(set(ids)) == 1


def test_a_stream_is_recorded_whole_and_replayed_as_deltas_then_the_reply(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    recorder = RecordingChatModel(ScriptedModel.from_replies(REPLIES, source="the test"), path)
    request = _request("I want a refund")

    async def record() -> list[StreamItem]:
        try:
            return await _in_case("c", lambda: _streamed(recorder, request))
        finally:
            await recorder.aclose()

    live = asyncio.run(record())
    replayed = asyncio.run(_in_case("c", lambda: _streamed(ReplayChatModel(path), request)))
    for items in (live, replayed):
        *deltas, reply = items
        assert isinstance(reply, ChatReply) and reply.content == "Refund issued.\nAnything else?"
        assert all(isinstance(delta, TextDelta) for delta in deltas)
        assert "".join(delta.text for delta in deltas if isinstance(delta, TextDelta)) == reply.content
    assert [item.text for item in replayed if isinstance(item, TextDelta)] == ["Refund issued.\n", "Anything else?"]


def test_a_stream_closed_before_its_reply_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    recorder = RecordingChatModel(ScriptedModel.from_replies(REPLIES, source="the test"), path)

    async def run() -> None:
        items = recorder.stream(_request("I want a refund"))
        await anext(aiter(items))
        await items.aclose()  # type: ignore[attr-defined]  # an async generator
        await recorder.aclose()

    asyncio.run(run())
    assert recorder.exchanges() == []
    assert path.read_text().endswith("version: 1\nexchanges: []\n")


def test_the_same_request_asked_again_gets_the_recorded_replies_in_order_then_the_last(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    replies = [{"content": "first"}, {"content": "second"}]
    recorder = RecordingChatModel(ScriptedModel.from_replies(replies, source="the test"), path)

    async def record() -> None:
        for _ in range(2):
            await _in_case("c", lambda: recorder.complete(_request("again")))
        await recorder.aclose()

    asyncio.run(record())
    replay = ReplayChatModel(path)

    async def run() -> list[str]:
        return [(await _in_case("c", lambda: replay.complete(_request("again")))).content for _ in range(4)]

    assert asyncio.run(run()) == ["first", "second", "second", "second"]


def test_a_failed_call_is_recorded_and_replayed_as_the_same_model_error(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    recorder = RecordingChatModel(ScriptedModel.from_replies(REPLIES, source="the test"), path)

    async def record() -> ModelError:
        try:
            await _in_case("c", lambda: recorder.complete(_request("an outage")))
        except ModelError as exc:
            return exc
        finally:
            await recorder.aclose()
        raise AssertionError("the call did not fail")

    live = asyncio.run(record())
    with pytest.raises(ModelError) as raised:
        asyncio.run(_in_case("c", lambda: ReplayChatModel(path).complete(_request("an outage"))))
    assert (raised.value.reason, raised.value.http_status) == (live.reason, 503)
    assert raised.value.detail.startswith(live.detail) and "a failure recorded at" in raised.value.detail


# --- a request the file does not hold ----------------------------------------------------------


def _not_recorded(path: Path, case: str | None, request: ChatRequest) -> str:
    with pytest.raises(ModelError) as raised:
        asyncio.run(_in_case(case, lambda: ReplayChatModel(path).complete(request)))
    assert raised.value.reason == NOT_RECORDED
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_a_changed_message_names_the_case_the_agent_and_where_the_messages_differ(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    _record(path, CASES)
    message = _not_recorded(path, "refund", _request("I want a refund now"))
    assert message.startswith(f"{path} has no recorded reply for case 'refund' (agent support/triage): ")
    assert "the messages differ at message 2 (user): recorded ...'t a refund', asked ...'t a refund now'" in message
    assert f"(the nearest recorded request is at {path}:" in message


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"model": "other-model"}, "the model differs: recorded 'test-model', asked 'other-model'"),
        ({"params": {"temperature": 0.7}}, "the params differ: temperature (recorded 0.2, asked 0.7)"),
        ({"tool_choice": "auto"}, "the tool_choice differs: recorded none, asked 'auto'"),
        (
            {"tools": ({"type": "function", "function": {"name": "lookup_order"}},)},
            "the tools differ: 'lookup_order' added",
        ),
        (
            {"messages": (*_request("Hello").messages, {"role": "user", "content": "more"})},
            "the messages differ in number: 2 recorded, 3 asked, the first 2 the same",
        ),
        (
            {"messages": ({"role": "user", "content": "You help."}, _request("Hello").messages[1])},
            "the messages differ at message 1: recorded a 'system' message, asked a 'user' one",
        ),
    ],
)
def test_a_changed_request_says_which_part_differs(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    path = tmp_path / "replay.yml"
    _record(path, CASES)
    assert said in _not_recorded(path, "plain", replace(_request("Hello"), **change))


def test_a_case_the_file_does_not_hold_is_named_with_a_did_you_mean(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    _record(path, CASES)
    message = _not_recorded(path, "refnud", _request("Something new"))
    assert message.endswith("(agent support/triage): it records no exchange of this case; did you mean 'refund'?")
    assert "this very request for case 'refund'" in _not_recorded(path, "other", _request("I want a refund"))
    assert "(its cases: order, plain, refund)" in _not_recorded(path, "zzz", _request("Something new"))
    assert "for a call outside any eval case" in _not_recorded(path, None, _request("Hello"))


def test_a_replay_serves_every_provider_and_says_so_at_the_call_it_lacks(tmp_path: Path) -> None:
    path = tmp_path / "replay.yml"
    _record(path, CASES)
    replay = ReplayChatModel(path)
    assert replay.binding_problem("anthropic") is None
    assert "the provider differs: recorded none, asked 'anthropic'" in _not_recorded(
        path, "plain", replace(_request("Hello"), provider="anthropic")
    )


# --- writing the file --------------------------------------------------------------------------


def test_closing_closes_the_inner_model_then_writes_the_file_once(tmp_path: Path) -> None:
    # The inner model is a recorder too: closing it writes its own file.
    inner = RecordingChatModel(ScriptedModel.from_replies(REPLIES, source="the test"), tmp_path / "inner.yml")
    recorder = RecordingChatModel(inner, tmp_path / "outer.yml")

    async def run() -> None:
        await _in_case("c", lambda: recorder.complete(_request("Hello")))
        await recorder.aclose()

    asyncio.run(run())
    assert (tmp_path / "inner.yml").read_bytes() == (tmp_path / "outer.yml").read_bytes()
    (tmp_path / "outer.yml").unlink()
    asyncio.run(recorder.aclose())
    # Written once; and no temporary file is left beside it.
    assert [path.name for path in tmp_path.iterdir()] == ["inner.yml"]


def test_a_recording_that_cannot_be_written_is_a_configuration_error_before_any_call(tmp_path: Path) -> None:
    model = ScriptedModel.from_replies(REPLIES, source="the test")
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    with pytest.raises(
        ConfigurationError, match=r"cannot write the recording .*a-file/such.yml: a file is in the way of its folder$"
    ):
        RecordingChatModel(model, tmp_path / "a-file" / "such.yml")
    with pytest.raises(ConfigurationError, match=r"cannot write the recording .*: it is a directory"):
        RecordingChatModel(model, tmp_path)


def test_the_folder_of_a_recording_is_made_before_any_call(tmp_path: Path) -> None:
    target = tmp_path / "evals" / "_replays" / "merge-request.yml"
    recorder = RecordingChatModel(ScriptedModel.from_replies(REPLIES, source="the test"), target)
    assert target.parent.is_dir() and not target.exists()
    asyncio.run(recorder.aclose())
    assert load_exchanges(target) == []
