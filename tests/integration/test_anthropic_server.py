"""The scripted Messages API server refuses what the real API refuses, so
that a translation mistake fails the tests that go through it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.anthropic_server import AnthropicServer

HI = {"role": "user", "content": "hi"}
TOOL = {"name": "search", "input_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnthropicServer]:
    with AnthropicServer([{"content": "ok", "repeat": True}], tmp_path_factory.mktemp("anthropic")) as running:
        yield running


def _post(server: AnthropicServer, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{server.base_url}/v1/messages",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers if headers is not None else {"x-api-key": "k"})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 10, "messages": [HI], **fields}


def test_a_valid_request_is_answered(server: AnthropicServer) -> None:
    status, answer = _post(server, _body())
    assert status == 200 and answer["content"] == [{"type": "text", "text": "ok"}]


def test_a_request_without_a_key_is_unauthorized(server: AnthropicServer) -> None:
    status, answer = _post(server, _body(), headers={})
    assert (status, answer["error"]["type"]) == (401, "authentication_error")


def _use(id_: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": id_, "name": "search", "input": {}}


def _result(id_: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id_, "content": "r"}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (_body(temperature=0.5), "temperature: Extra inputs are not permitted"),
        (_body(top_k=5), "top_k: Extra inputs are not permitted"),
        ({"model": "m", "messages": [HI]}, "max_tokens: Field required"),
        (_body(messages=[]), "messages: at least one message is required"),
        (_body(messages=[{"role": "assistant", "content": "hi"}]), "messages.0: roles must alternate"),
        (_body(messages=[HI, HI]), "messages.1: roles must alternate"),
        (
            _body(messages=[{"role": "system", "content": "x"}]),
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (_body(messages=[{"role": "user", "content": " "}]), "text content blocks must contain non-whitespace text"),
        (_body(messages=[{"role": "user", "content": []}]), "messages.0: all messages must have non-empty content"),
        (
            _body(
                messages=[
                    HI,
                    {"role": "assistant", "content": [_use("a")]},
                    {"role": "user", "content": [_result("b")]},
                ]
            ),
            "unexpected tool_use_id found in tool_result blocks: b",
        ),
        (
            _body(messages=[HI, {"role": "assistant", "content": [_use("a")]}, HI]),
            "tool_use ids were found without tool_result blocks immediately after: a",
        ),
        (
            _body(
                messages=[
                    HI,
                    {"role": "assistant", "content": [_use("a")]},
                    {"role": "user", "content": [{"type": "text", "text": "x"}, _result("a")]},
                ]
            ),
            "tool_result blocks must come first in the message",
        ),
        (
            _body(messages=[HI, {"role": "assistant", "content": "so "}]),
            "final assistant content cannot end with trailing whitespace",
        ),
        (_body(tool_choice={"type": "auto"}), "tool_choice may only be specified while providing tools"),
        (_body(tools=[TOOL], tool_choice={"type": "tool", "name": "other"}), "there is no tool named 'other'"),
        (_body(tools=[{"name": "bad name", "input_schema": {"type": "object"}}]), "tools.0.name: String should match"),
        (
            _body(tools=[{"name": "t", "input_schema": {"type": "array"}}]),
            "tools.0.input_schema.type: Input should be 'object'",
        ),
        (_body(stop_sequences="END"), "stop_sequences: Input should be a valid list of strings"),
    ],
)
def test_what_the_api_refuses_is_a_400_invalid_request_error(
    server: AnthropicServer, body: dict[str, Any], problem: str
) -> None:
    status, answer = _post(server, body)
    assert (status, answer["type"], answer["error"]["type"]) == (400, "error", "invalid_request_error")
    assert problem in answer["error"]["message"]


def test_every_request_is_logged_with_when_it_came(server: AnthropicServer) -> None:
    _post(server, _body(messages=[{"role": "user", "content": "logged"}]))
    entry = server.entries()[-1]
    assert entry["body"]["messages"] == [{"role": "user", "content": "logged"}]
    assert entry["in_flight"] == 1 and entry["at"] > 0
