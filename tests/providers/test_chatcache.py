"""The cache of replies on disk: a request asked in an earlier run is
answered from it, marked as such, with no model call; the n-th asking of a
request in a case gets the n-th reply stored; streams are cached whole;
failures are not stored; an entry that cannot be used is a logged miss,
and is written anew. tests/integration/test_chatcache_processes.py has two
processes fill one directory at once."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.executor.scripted import ScriptedModel
from registry.providers.chat import ChatReply, ChatRequest, StreamItem, TextDelta
from registry.providers.chatcache import CachingChatModel
from registry.providers.exchanges import request_key
from registry.providers.recording import exchange_label

REQUEST = ChatRequest(model="test-model", messages=({"role": "user", "content": "Hello"},), agent="chat/minimal")


def _cache(directory: Path, replies: list[dict[str, Any]]) -> CachingChatModel:
    return CachingChatModel(ScriptedModel.from_replies(replies, source="the test"), directory)


def _ask(model: CachingChatModel, *, times: int = 1, case: str | None = None) -> list[ChatReply]:
    async def run() -> list[ChatReply]:
        exchange_label.set(case)
        try:
            return [await model.complete(REQUEST) for _ in range(times)]
        finally:
            await model.aclose()

    return asyncio.run(run())


def test_a_request_asked_in_an_earlier_run_is_answered_from_the_cache(tmp_path: Path) -> None:
    (live,) = _ask(_cache(tmp_path, [{"content": "Hi there."}]))
    # No reply left in the script: a call to the model would fail.
    (cached,) = _ask(_cache(tmp_path, []))
    assert (live.origin, cached.origin) == (None, "cache")
    assert cached.content == "Hi there." and cached.usage == live.usage
    (entry,) = (tmp_path / request_key(REQUEST)[:2]).iterdir()
    assert entry.name == f"{request_key(REQUEST)}-0.json"
    assert json.loads(entry.read_text())["request"]["messages"] == [{"role": "user", "content": "Hello"}]


def test_the_nth_asking_of_a_request_in_a_case_gets_the_nth_reply_stored(tmp_path: Path) -> None:
    live = _ask(_cache(tmp_path, [{"content": "one"}, {"content": "two"}]), times=2, case="c")
    cached = _ask(_cache(tmp_path, [{"content": "three"}]), times=3, case="c")
    assert [reply.content for reply in live] == ["one", "two"]
    assert [(reply.content, reply.origin) for reply in cached] == [("one", "cache"), ("two", "cache"), ("three", None)]
    # Another case asking the same request shares what is stored.
    assert [reply.content for reply in _ask(_cache(tmp_path, []), case="other")] == ["one"]


def test_a_stream_is_stored_once_it_ends_and_answered_from_the_cache_as_deltas(tmp_path: Path) -> None:
    async def stream(model: CachingChatModel) -> list[StreamItem]:
        try:
            return [item async for item in model.stream(REQUEST)]
        finally:
            await model.aclose()

    live = asyncio.run(stream(_cache(tmp_path, [{"content": "Line one\nline two"}])))
    cached = asyncio.run(stream(_cache(tmp_path, [])))
    assert [item.text for item in cached if isinstance(item, TextDelta)] == ["Line one\n", "line two"]
    assert isinstance(live[-1], ChatReply) and isinstance(cached[-1], ChatReply)
    assert (cached[-1].content, cached[-1].origin) == (live[-1].content, "cache")


def test_a_failed_call_is_not_stored(tmp_path: Path) -> None:
    with pytest.raises(ModelError):
        _ask(_cache(tmp_path, [{"error": {"status": 503}}]))
    assert [reply.content for reply in _ask(_cache(tmp_path, [{"content": "back"}]))] == ["back"]


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda text: text[: len(text) // 2], "cannot be used (Expecting"),
        (lambda text: text.replace('"version": 1', '"version": 2'), "it is not an entry of version 1"),
        (lambda text: text.replace(request_key(REQUEST), "0" * 64), "it is the entry of another request"),
        (lambda text: text.replace('"content": "stored"', '"content": 3'), "its reply has no content"),
    ],
)
def test_an_entry_that_cannot_be_used_is_a_logged_miss_and_is_written_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil: Any, why: str
) -> None:
    _ask(_cache(tmp_path, [{"content": "stored"}]))
    entry = tmp_path / request_key(REQUEST)[:2] / f"{request_key(REQUEST)}-0.json"
    entry.write_text(spoil(entry.read_text()))
    with caplog.at_level(logging.WARNING, logger="registry.providers.chatcache"):
        (reply,) = _ask(_cache(tmp_path, [{"content": "asked again"}]))
    assert (reply.content, reply.origin) == ("asked again", None)
    assert why in caplog.text and str(entry) in caplog.text
    assert [reply.content for reply in _ask(_cache(tmp_path, []))] == ["asked again"]


def test_a_cache_directory_that_cannot_be_made_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigurationError, match=r"cannot use the cache directory .*file/cache"):
        _cache(tmp_path / "file" / "cache", [])
