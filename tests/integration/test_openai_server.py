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


def test_a_stream_comes_as_chunks_with_usage_when_asked_and_the_log_says_it_finished(tmp_path: Path) -> None:
    with ScriptedModelServer([{"chunks": ["Hel", "lo"]}], tmp_path) as server, _client(server) as client:
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert [c.choices[0].delta.content for c in chunks if c.choices] == ["", "Hel", "lo", None]
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15
        assert server.wait_for_endings(1) == [("finished", 6)]


def test_llama_cpp_drops_tools_sent_without_a_tool_choice(tmp_path: Path) -> None:
    replies: list[dict[str, Any]] = [{"tool_calls": [{"name": "f"}], "content": "in words", "repeat": True}]
    tools: list[Any] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with ScriptedModelServer(replies, tmp_path, flavor="llama.cpp") as server, _client(server) as client:
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        plain = client.chat.completions.create(model="m", messages=messages, tools=tools)
        chosen = client.chat.completions.create(model="m", messages=messages, tools=tools, tool_choice="auto")
    assert (plain.choices[0].message.content, plain.choices[0].message.tool_calls) == ("in words", None)
    assert chosen.choices[0].message.tool_calls


@pytest.mark.parametrize(
    "request_fields",
    [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]},
        {"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {}}}},
    ],
)
def test_llama_cpp_answers_500_where_llama_cpp_python_does(request_fields: dict[str, Any], tmp_path: Path) -> None:
    fields: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], **request_fields}
    with ScriptedModelServer([{"content": "ok"}], tmp_path, flavor="llama.cpp") as server:
        with _client(server, max_retries=0) as client, pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", **fields)


def test_strict_refuses_what_openai_refuses(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok", "repeat": True}], tmp_path, flavor="strict") as server:
        with _client(server, max_retries=0) as client:
            messages: list[Any] = [{"role": "user", "content": "hi"}]
            with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: top_k"):
                client.chat.completions.create(model="m", messages=messages, extra_body={"top_k": 3})
            with pytest.raises(openai.BadRequestError, match="'tool_choice' is only allowed when 'tools'"):
                client.chat.completions.create(model="m", messages=messages, tool_choice="auto")
            with pytest.raises(openai.BadRequestError, match="'stream_options' parameter is only allowed"):
                client.chat.completions.create(model="m", messages=messages, stream_options={"include_usage": True})
            assert client.chat.completions.create(model="m", messages=messages).choices[0].message.content == "ok"


@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5.1-mini"])
def test_strict_refuses_max_tokens_to_a_reasoning_model_as_openai_does(model: str, tmp_path: Path) -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    with ScriptedModelServer([{"content": "ok", "repeat": True}], tmp_path, flavor="strict") as server:
        with _client(server, max_retries=0) as client:
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(model=model, messages=messages, max_tokens=50)
            taken = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=50)
            older = client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=50)
    assert refused.value.body == {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model."
        " Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
    assert taken.choices[0].message.content == older.choices[0].message.content == "ok"


def test_vllm_serves_only_its_model(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok"}], tmp_path, flavor="vllm", served_model="qwen") as server:
        with _client(server, max_retries=0) as client, pytest.raises(openai.NotFoundError, match="does not exist"):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_azure_openai_s_sdk_client_reaches_it_on_the_deployments_path(tmp_path: Path) -> None:
    with ScriptedModelServer([{"content": "ok"}], tmp_path) as server:
        with openai.AzureOpenAI(
            azure_endpoint=server.azure_endpoint, api_key="test-key", api_version="2024-10-21", max_retries=0
        ) as client:
            answer = client.chat.completions.create(model="dep", messages=[{"role": "user", "content": "hi"}])
        (entry,) = [entry for entry in server.entries() if "path" in entry]
    assert answer.choices[0].message.content == "ok"
    assert (entry["path"], entry["auth"]) == (
        "/openai/deployments/dep/chat/completions?api-version=2024-10-21",
        "api-key",
    )


def test_a_client_that_leaves_mid_stream_is_logged_as_disconnected(tmp_path: Path) -> None:
    replies = [{"content": "x" * 200, "chunk_chars": 1, "delay_between": 0.02}]
    with ScriptedModelServer(replies, tmp_path) as server, _client(server) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        next(iter(stream))
        stream.close()
        ((ending, events),) = server.wait_for_endings(1)
    assert ending == "disconnected" and events < 200


def test_llama_cpp_cannot_stream_a_reply_whose_tool_it_chooses(tmp_path: Path) -> None:
    tools: list[Any] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with ScriptedModelServer([{"tool_calls": [{"name": "f"}]}], tmp_path, flavor="llama.cpp") as server:
        with _client(server, max_retries=0) as client:
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], tools=tools, tool_choice="auto", stream=True
            )
            assert list(stream) == []
