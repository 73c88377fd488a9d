"""The scripted OpenAI-compatible server the executor's tests run against,
checked through the official openai SDK over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from tests.support.openai_server import ScriptedModelServer


@contextmanager
def _client(server: ScriptedModelServer, **options: object) -> Iterator[openai.OpenAI]:
    # Closed at the end: its kept-alive connections would otherwise be found
    # unclosed by the garbage collector, in whichever test runs then.
    with openai.OpenAI(base_url=server.base_url, api_key="test-key", **options) as client:  # type: ignore[arg-type]
        yield client


def test_replies_come_in_order_and_each_request_is_recorded(tmp_path: Path) -> None:
    replies = [{"content": "first"}, {"content": "second"}]
    with ScriptedModelServer(replies, tmp_path) as server, _client(server) as client:
        for expected in ("first", "second"):
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert answer.choices[0].message.content == expected
            assert answer.usage is not None and answer.usage.total_tokens == 15
        assert [request["model"] for request in server.requests()] == ["m", "m"]


def test_a_reply_can_be_chosen_by_the_last_message_and_can_call_tools(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"when": "weather", "tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo"}}]},
        {"content": "anything else", "repeat": True},
    ]
    with ScriptedModelServer(replies, tmp_path) as server, _client(server) as client:
        other = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        assert other.choices[0].message.content == "anything else"
        asked = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "the weather?"}])
        (call,) = asked.choices[0].message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        assert call.function.name == "forecast" and call.function.arguments == '{"city": "Oslo"}'
        assert asked.choices[0].finish_reason == "tool_calls"


def test_errors_are_http_errors_the_sdk_retries_and_reports(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [
        {"status": 500},
        {"content": "after a retry"},
        {"status": 400},
        {"raw": "{not json"},
    ]
    with ScriptedModelServer(replies, tmp_path) as server, _client(server, max_retries=1) as client:
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert answer.choices[0].message.content == "after a retry"
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        # A malformed body reaches the caller as the SDK's JSON decoding error:
        # the executor has to turn it into a failed outcome itself.
        with pytest.raises(ValueError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert len(server.requests()) == 4


def test_a_slow_reply_runs_into_the_clients_timeout(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([{"content": "late", "delay": 5}], tmp_path) as server,
        _client(server, max_retries=0, timeout=0.5) as client,
    ):
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
