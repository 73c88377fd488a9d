"""The scripted model: replies chosen in order, by agent and by the last
message, used once or more, and scripts refused at load with where the
problem is."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ConfigurationError, ModelError
from registry.executor.scripted import ScriptedModel
from registry.providers.chat import ChatReply, ChatRequest, ToolCallRequest, Usage
from tests.support.waits import LATE


def _request(text: Any = "hello", *, agent: str | None = None, timeout: float | None = None) -> ChatRequest:
    messages = ({"role": "system", "content": "You are terse."}, {"role": "user", "content": text})
    return ChatRequest(model="m", messages=messages, agent=agent, timeout=timeout)


def _model(replies: list[Any]) -> ScriptedModel:
    return ScriptedModel.from_replies(replies, source="test")


def _ask(model: ScriptedModel, *requests: ChatRequest) -> list[ChatReply]:
    async def scenario() -> list[ChatReply]:
        return [await model.complete(request) for request in requests]

    return asyncio.run(scenario())


def _contents(model: ScriptedModel, *requests: ChatRequest) -> list[str]:
    return [reply.content for reply in _ask(model, *requests)]


def _failure(model: ScriptedModel, request: ChatRequest) -> ModelError:
    with pytest.raises(ModelError) as caught:
        _ask(model, request)
    return caught.value


def _load_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "replies.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        ScriptedModel.from_file(path)
    return str(caught.value).replace(str(path), "replies.yml")


def test_replies_come_in_order_each_once() -> None:
    model = _model([{"content": "first"}, {"content": "second"}])
    assert _contents(model, _request(), _request()) == ["first", "second"]
    error = _failure(model, _request("How do I get a refund for order 1234? It arrived broken."))
    assert error.reason == "no-reply"
    assert str(error) == (
        "scripted test has no reply left for a call, whose last message begins"
        " 'How do I get a refund for order 1234? It arrived broken.'"
    )


def test_the_exhaustion_message_names_the_agent_and_the_beginning_of_the_message() -> None:
    model = _model([])
    error = _failure(model, _request("x" * 100, agent="support/triage"))
    assert (
        str(error) == f"scripted test has no reply left for support/triage, whose last message begins '{'x' * 57}...'"
    )


def test_a_reply_for_an_agent_answers_only_that_agents_calls() -> None:
    model = _model([{"agent": "support/classify", "content": "billing"}, {"content": "anyone", "repeat": True}])
    assert _contents(model, _request(agent="support/answer"), _request()) == ["anyone", "anyone"]
    assert _contents(model, _request(agent="support/classify")) == ["billing"]


def test_when_is_searched_in_the_last_messages_text() -> None:
    model = _model(
        [
            {"when": "(?i)refund", "content": '{"label": "billing"}'},
            {"when": "^bug", "content": '{"label": "bug"}'},
            {"content": "other", "repeat": True},
        ]
    )
    assert _contents(model, _request("a bug report")) == ["other"]  # ^bug does not match
    assert _contents(model, _request("I want a REFUND")) == ['{"label": "billing"}']
    assert _contents(model, _request("I want a refund")) == ["other"]  # used up
    parts = [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "bug: it crashes"}]
    assert _contents(model, _request(parts)) == ['{"label": "bug"}']


def test_a_reply_that_repeats_is_used_without_limit_and_times_counts_its_uses() -> None:
    model = _model([{"content": "thrice", "times": 3}, {"content": "always", "repeat": True}])
    assert _contents(model, *[_request()] * 5) == ["thrice"] * 3 + ["always"] * 2
    assert model.unused() == []


def test_tool_calls_carry_arguments_as_json_text_or_as_written_with_ids_numbered_per_model() -> None:
    model = _model(
        [
            {
                "content": "Let me look.",
                "tool_calls": [{"name": "search", "arguments": {"query": "deploy tokens"}}, {"name": "now"}],
            },
            {"tool_calls": [{"name": "search", "arguments": '{"query": unquoted}'}]},
        ]
    )
    first, second = _ask(model, _request(), _request())
    assert first.content == "Let me look." and first.finish_reason == "tool_calls"
    assert first.tool_calls == (
        ToolCallRequest(id="call_1", name="search", arguments='{"query": "deploy tokens"}'),
        ToolCallRequest(id="call_2", name="now", arguments="{}"),
    )
    assert json.loads(first.tool_calls[0].arguments) == {"query": "deploy tokens"}
    assert second.content == ""
    assert second.tool_calls == (ToolCallRequest(id="call_3", name="search", arguments='{"query": unquoted}'),)


def test_an_error_reply_fails_the_call_with_its_status() -> None:
    model = _model([{"error": {"status": 500, "message": "overloaded"}}, {"content": "recovered"}])
    error = _failure(model, _request())
    assert (error.reason, error.http_status) == ("status", 500)
    assert str(error) == "the scripted model answered 500 Internal Server Error: overloaded"
    assert _contents(model, _request()) == ["recovered"]


def test_a_text_reply_reports_its_model_finish_reason_and_word_counts() -> None:
    (reply,) = _ask(_model([{"content": "Final Answer: 42"}]), _request("what is six times seven"))
    assert reply == ChatReply(
        content="Final Answer: 42",
        usage=Usage(input_tokens=8, output_tokens=3),  # "You are terse." and the question; the answer
        model="m",
        finish_reason="stop",
    )


def test_usage_can_be_scripted() -> None:
    model = _model([{"content": "x", "usage": {"input_tokens": 10, "output_tokens": 3}}, {"content": "y", "usage": {}}])
    first, second = _ask(model, _request(), _request())
    assert first.usage == Usage(input_tokens=10, output_tokens=3)
    assert second.usage == Usage()


def test_a_delay_is_waited_and_one_longer_than_the_timeout_times_out() -> None:
    model = _model([{"content": "slow", "delay": 0.2}, {"content": "too slow", "delay": LATE}])
    started = time.monotonic()
    assert _contents(model, _request()) == ["slow"]
    # A lower bound on the model's own sleep, which never ends early: it cannot flake.
    assert time.monotonic() - started >= 0.2
    # A model that waited the delay out would answer "too slow", not fail.
    error = _failure(model, _request(timeout=0.1))
    assert (error.reason, str(error)) == ("timeout", "the scripted model did not answer within 0.1 s")


def test_unused_lists_the_replies_never_used_with_where_they_are(tmp_path: Path) -> None:
    path = tmp_path / "replies.yml"
    path.write_text("replies:\n  - content: used\n  - content: never\n    agent: nobody\n", encoding="utf-8")
    model = ScriptedModel.from_file(path)
    assert model.description == f"scripted {path}"
    _ask(model, _request())
    (unused,) = model.unused()
    assert (unused.content, unused.agent, str(unused)) == ("never", "nobody", f"{path}:3")
    assert [str(reply) for reply in _model([{"content": "a"}]).unused()] == ["test#/0"]


def test_a_yaml_list_is_a_script(tmp_path: Path) -> None:
    path = tmp_path / "replies.yml"
    path.write_text(
        "- agent: support/classify_request\n"
        "  when: '(?i)refund'\n"
        '  content: \'{"label": "billing"}\'\n'
        "- tool_calls:\n"
        "    - {name: search, arguments: {query: deploy tokens}}\n"
        "- error: {status: 429, message: slow down}\n",
        encoding="utf-8",
    )
    model = ScriptedModel.from_file(str(path))
    (classified,) = _ask(model, _request("Refund please", agent="support/classify_request"))
    assert classified.content == '{"label": "billing"}'
    (searched,) = _ask(model, _request())
    assert searched.tool_calls == (ToolCallRequest(id="call_1", name="search", arguments='{"query": "deploy tokens"}'),)
    assert _failure(model, _request()).http_status == 429


def test_concurrent_calls_each_get_a_distinct_reply() -> None:
    model = _model([{"content": f"reply {n}", "delay": 0.01} for n in range(100)])

    async def scenario() -> list[ChatReply]:
        return await asyncio.gather(*(model.complete(_request()) for _ in range(100)))

    contents = [reply.content for reply in asyncio.run(scenario())]
    assert sorted(contents) == sorted(f"reply {n}" for n in range(100))


def test_calls_from_several_threads_each_get_a_distinct_reply_and_distinct_call_ids() -> None:
    model = _model([{"tool_calls": [{"name": "f"}, {"name": "g"}], "repeat": True}])
    ids: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for reply in _ask(model, *[_request()] * 50):
            with lock:
                ids.extend(call.id for call in reply.tool_calls)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids) == sorted(f"call_{n}" for n in range(1, 401))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"^scripted replies file .*nowhere\.yml does not exist$"):
        ScriptedModel.from_file(tmp_path / "nowhere.yml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- content: [unclosed\n", "replies.yml:2:1: YAML syntax error: "),
        ("content: hello\n", "replies.yml:1:1: unknown key 'content'"),
        ("replies: hello\n", "replies.yml:1:10: the replies must be a list, not text"),
        ("title: x\n", "replies.yml:1:1: unknown key 'title', and 1 more problem"),
        ("replys:\n  - content: x\n", "replies.yml:1:1: unknown key 'replys'; did you mean 'replies'?"),
        ("42\n", "replies.yml:1:1: the replies must be a list, not a number"),
        ("- hello\n", "replies.yml:1:3: a reply must be a mapping, not text"),
        ("- contnet: x\n", "replies.yml:1:3: unknown key 'contnet'; did you mean 'content'?"),
        ("- agent: a/b\n", "replies.yml:1:3: a reply needs content, tool_calls or error"),
        ("- content: 42\n", "replies.yml:1:12: content must be text, not a number"),
        ("- content: x\n  agent: [a]\n", "replies.yml:2:10: agent must be text, not a list"),
        ("- content: x\n  repeat: 'yes'\n", "replies.yml:2:11: repeat must be true or false, not text"),
        ("- content: x\n  times: 0\n", "replies.yml:2:10: times must be 1 or more, not 0"),
        ("- content: x\n  times: true\n", "replies.yml:2:10: times must be an integer, not true or false"),
        ("- content: x\n  times: 2\n  repeat: true\n", "replies.yml:2:3: a reply has repeat or times, not both"),
        ("- content: x\n  delay: -1\n", "replies.yml:2:10: delay must be 0 seconds or more, not -1"),
        ("- content: x\n  delay: soon\n", "replies.yml:2:10: delay must be a number of seconds, not text"),
        (
            "- content: x\n  when: '(?<=a)b'\n",
            "replies.yml:2:9: when '(?<=a)b' is not a regular expression RE2 can run (invalid perl operator: (?<=);"
            " RE2 has no backreferences or lookaround",
        ),
        ("- tool_calls: []\n", "replies.yml:1:15: tool_calls must be a list of calls, not a list"),
        ("- tool_calls: [{arguments: {}}]\n", "replies.yml:1:16: a tool call needs a name"),
        ("- tool_calls: [{name: f, args: {}}]\n", "replies.yml:1:26: unknown key 'args'; did you mean 'arguments'?"),
        (
            "- tool_calls: [{name: f, arguments: 3}]\n",
            "replies.yml:1:37: arguments must be a mapping or text, not a number",
        ),
        ("- error: 500\n", "replies.yml:1:10: error must be a mapping with a status, not a number"),
        ("- error: {message: x}\n", "replies.yml:1:10: error needs a status"),
        ("- error: {status: 200}\n", "replies.yml:1:19: status must be an HTTP error status (400 to 599), not 200"),
        ("- error: {status: 500}\n  content: x\n", "replies.yml:1:3: an error reply cannot have content or tool_calls"),
        ("- content: x\n  usage: 10\n", "replies.yml:2:10: usage must be a mapping of token counts, not a number"),
        ("- content: x\n  usage: {input_tokens: -1}\n", "replies.yml:2:25: input_tokens must be 0 or more, not -1"),
        ("- content: x\n  usage: {tokens: 1}\n", "replies.yml:2:11: unknown key 'tokens'"),
    ],
)
def test_a_script_that_cannot_be_used_is_refused_with_where(tmp_path: Path, text: str, message: str) -> None:
    assert _load_error(tmp_path, text).startswith(message)


def test_every_problem_is_counted_and_the_first_one_named(tmp_path: Path) -> None:
    text = "- content: x\n  tmies: 3\n- agent: a/b\n- content: y\n  delay: -2\n"
    assert (
        _load_error(tmp_path, text)
        == "replies.yml:2:3: unknown key 'tmies'; did you mean 'times'?, and 2 more problems"
    )


def test_replies_given_in_python_are_checked_too_with_their_index() -> None:
    with pytest.raises(ConfigurationError) as caught:
        ScriptedModel.from_replies([{"content": "ok"}, {"contnet": "x"}], source="support/triage examples")
    assert str(caught.value) == (
        "support/triage examples#/1: unknown key 'contnet'; did you mean 'content'?, and 1 more problem"
    )
    assert [issue.path for issue in caught.value.errors] == ["/1", "/1"]
    with pytest.raises(ConfigurationError, match=r"^test: the replies must be a list, not a mapping$"):
        ScriptedModel.from_replies({"content": "x"}, source="test")  # type: ignore[arg-type]
