"""The Chat Completions request the OpenAI adapter builds, per kind of
endpoint and per server: what is sent, under which names, and what was
changed on the way."""

from __future__ import annotations

from typing import Any

import pytest

from registry.providers.chat import Adjustment, ChatRequest, ResponseFormat
from registry.providers.openai_request import Dialect, Server, build, can_stream

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "required": ["label"], "properties": {"label": {"type": "string"}}}
OPENAI = Dialect("openai")
AZURE = Dialect("azure_openai")
GENERIC = Dialect("openai_compatible")


def _request(**fields: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=({"role": "user", "content": "hi"},), **fields)


def _compatible(server: Server) -> Dialect:
    return Dialect("openai_compatible", server)


def test_a_plain_request_sends_the_model_and_the_messages_only() -> None:
    sent = build(_request(), OPENAI, stream=False)
    assert dict(sent.arguments) == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert sent.adjustments == ()


def test_a_stream_asks_for_the_usage_at_its_end() -> None:
    arguments = build(_request(), GENERIC, stream=True).arguments
    assert (arguments["stream"], arguments["stream_options"]) == (True, {"include_usage": True})


def test_openai_gets_every_param_it_has_natively_and_nothing_it_lacks() -> None:
    params = {"temperature": 0.1, "top_p": 0.9, "max_tokens": 9, "stop": ["X"], "seed": 3, "top_k": 40, "mirostat": 2}
    sent = build(_request(params=params), OPENAI, stream=False)
    assert {key: sent.arguments[key] for key in ("temperature", "top_p", "max_completion_tokens", "stop", "seed")} == {
        "temperature": 0.1,
        "top_p": 0.9,
        "max_completion_tokens": 9,
        "stop": ["X"],
        "seed": 3,
    }
    # top_k is not OpenAI's, mirostat no one's: the executor records them as not sent.
    assert "top_k" not in sent.arguments and "extra_body" not in sent.arguments


@pytest.mark.parametrize("dialect", [OPENAI, AZURE])
def test_openai_and_azure_get_max_tokens_as_max_completion_tokens(dialect: Dialect) -> None:
    # Deprecated for every model, refused by the reasoning ones (o1, o3, gpt-5...).
    arguments = build(_request(params={"max_tokens": 64}), dialect, stream=False).arguments
    assert (arguments["max_completion_tokens"], "max_tokens" in arguments) == (64, False)


@pytest.mark.parametrize("dialect", [GENERIC, _compatible("llama.cpp"), _compatible("vllm"), _compatible("ollama")])
def test_compatible_servers_keep_max_tokens(dialect: Dialect) -> None:
    arguments = build(_request(params={"max_tokens": 64}), dialect, stream=False).arguments
    assert (arguments["max_tokens"], "max_completion_tokens" in arguments) == (64, False)


def test_a_compatible_server_gets_the_local_sampling_options_and_its_own_as_extra_body() -> None:
    params = {"temperature": 0.1, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "mirostat": 2}
    sent = build(_request(params=params), GENERIC, stream=False)
    assert sent.arguments["temperature"] == 0.1
    assert sent.arguments["extra_body"] == {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "mirostat": 2}


def test_llama_cpp_gets_repetition_penalty_under_its_own_name() -> None:
    sent = build(_request(params={"repetition_penalty": 1.1}), _compatible("llama.cpp"), stream=False)
    assert sent.arguments["extra_body"] == {"repeat_penalty": 1.1}


@pytest.mark.parametrize("dialect", [OPENAI, AZURE, GENERIC, _compatible("llama.cpp"), _compatible("vllm")])
def test_tools_always_go_with_a_tool_choice_auto_unless_the_request_names_one(dialect: Dialect) -> None:
    arguments = build(_request(tools=(SEARCH,)), dialect, stream=False).arguments
    assert (arguments["tools"], arguments["tool_choice"]) == ([SEARCH], "auto")
    assert (
        build(_request(tools=(SEARCH,), tool_choice="none"), dialect, stream=False).arguments["tool_choice"] == "none"
    )


def test_no_tools_no_tool_choice_even_when_the_request_has_one() -> None:
    assert "tool_choice" not in build(_request(tool_choice="required"), OPENAI, stream=False).arguments


def test_a_tools_name_becomes_a_named_function_choice() -> None:
    sent = build(_request(tools=(SEARCH, NOW), tool_choice="now"), GENERIC, stream=False)
    assert sent.arguments["tool_choice"] == {"type": "function", "function": {"name": "now"}}


def test_required_is_sent_as_required_except_to_llama_cpp() -> None:
    for dialect in (OPENAI, GENERIC, _compatible("vllm")):
        assert (
            build(_request(tools=(SEARCH,), tool_choice="required"), dialect, stream=False).arguments["tool_choice"]
            == "required"
        )


def test_llama_cpp_gets_the_one_tool_by_name_for_required_and_says_so() -> None:
    sent = build(_request(tools=(SEARCH,), tool_choice="required"), _compatible("llama.cpp"), stream=False)
    assert sent.arguments["tool_choice"] == {"type": "function", "function": {"name": "search"}}
    assert sent.adjustments == (
        Adjustment(
            "tool_choice", "tool_choice required was sent as the one tool offered, search: llama.cpp refuses required"
        ),
    )


def test_llama_cpp_gets_auto_for_required_among_several_tools_and_says_so() -> None:
    sent = build(_request(tools=(SEARCH, NOW), tool_choice="required"), _compatible("llama.cpp"), stream=False)
    assert sent.arguments["tool_choice"] == "auto"
    assert sent.adjustments == (
        Adjustment("tool_choice", "tool_choice required was sent as auto: llama.cpp refuses required"),
    )


def test_parallel_tool_calls_goes_only_with_tools() -> None:
    alone = build(_request(params={"parallel_tool_calls": False}), OPENAI, stream=False)
    assert "parallel_tool_calls" not in alone.arguments
    assert alone.adjustments == (
        Adjustment("parallel_tool_calls", "parallel_tool_calls was not sent: no tools are offered"),
    )
    with_tools = build(_request(tools=(SEARCH,), params={"parallel_tool_calls": False}), OPENAI, stream=False)
    assert with_tools.arguments["parallel_tool_calls"] is False


def test_an_assistant_turn_that_called_tools_is_sent_with_empty_content_not_null() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    turns = (
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": None},
    )
    request = ChatRequest(model="m", messages=turns, tools=(SEARCH,))
    sent = build(request, _compatible("llama.cpp"), stream=False).arguments["messages"]
    assert sent[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert sent[2] == {"role": "tool", "tool_call_id": "c1", "content": "found"}
    assert sent[3] == {"role": "assistant", "content": None}  # no tool calls: as written
    assert request.messages[1]["content"] is None  # the request itself is not changed


@pytest.mark.parametrize("dialect", [OPENAI, AZURE, _compatible("vllm"), _compatible("litellm")])
def test_a_schema_is_asked_for_as_a_json_schema_where_the_server_takes_one(dialect: Dialect) -> None:
    sent = build(_request(response_format=ResponseFormat(SCHEMA, "support/classify")), dialect, stream=False)
    assert sent.arguments["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "support_classify", "schema": SCHEMA, "strict": False},
    }
    assert sent.adjustments == ()


def test_llama_cpp_gets_json_mode_with_the_schema_beside_it() -> None:
    sent = build(_request(response_format=ResponseFormat(SCHEMA)), _compatible("llama.cpp"), stream=False)
    assert sent.arguments["response_format"] == {"type": "json_object", "schema": SCHEMA}
    assert sent.adjustments == (
        Adjustment("response_format", "response_format was sent as json_object with the schema, which llama.cpp takes"),
    )


def test_llama_cpp_gets_the_schema_without_size_bounds_which_crash_its_grammars() -> None:
    # maxLength 6000 made llama-cpp-python 0.3.36 fail to build the grammar,
    # then segfault: the whole server went down (a realmodel run found it).
    bounded = {
        "type": "object",
        "properties": {
            "feedback": {"type": "string", "maxLength": 6000, "minLength": 1},
            "labels": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 300},
            # A property that is named like a bound is a property, kept.
            "maxLength": {"type": "integer"},
        },
    }
    sent = build(_request(response_format=ResponseFormat(bounded)), _compatible("llama.cpp"), stream=False)
    assert sent.arguments["response_format"]["schema"] == {
        "type": "object",
        "properties": {
            "feedback": {"type": "string"},
            "labels": {"type": "array", "items": {"type": "string"}},
            "maxLength": {"type": "integer"},
        },
    }
    why = "the schema was sent without maxItems, maxLength, minLength: llama.cpp's grammars cannot repeat that far"
    assert sent.adjustments[-1] == Adjustment("response_format", why)
    # Other servers get the schema as written.
    assert (
        build(_request(response_format=ResponseFormat(bounded)), OPENAI, stream=False).arguments["response_format"][
            "json_schema"
        ]["schema"]
        == bounded
    )


@pytest.mark.parametrize(("dialect", "who"), [(GENERIC, "this server"), (_compatible("ollama"), "ollama")])
def test_other_servers_get_json_mode_and_the_trace_is_told_the_schema_was_not_sent(dialect: Dialect, who: str) -> None:
    sent = build(_request(response_format=ResponseFormat(SCHEMA)), dialect, stream=False)
    assert sent.arguments["response_format"] == {"type": "json_object"}
    why = f"response_format was sent as json_object, without the schema: {who} may not take one"
    assert sent.adjustments == (Adjustment("response_format", why),)


def test_json_without_a_schema_is_json_mode_everywhere() -> None:
    for dialect in (OPENAI, GENERIC, _compatible("llama.cpp")):
        sent = build(_request(response_format=ResponseFormat()), dialect, stream=False)
        assert (sent.arguments["response_format"], sent.adjustments) == ({"type": "json_object"}, ())


def test_llama_cpp_streams_every_reply_but_one_whose_tool_it_chooses() -> None:
    llama = _compatible("llama.cpp")
    assert can_stream(_request(), llama)
    assert can_stream(_request(tools=(SEARCH,), tool_choice="search"), llama)
    assert can_stream(_request(tools=(SEARCH,), tool_choice="required"), llama)  # sent by name
    assert can_stream(_request(tools=(SEARCH,), tool_choice="none"), llama)
    assert not can_stream(_request(tools=(SEARCH,)), llama)
    assert not can_stream(_request(tools=(SEARCH, NOW), tool_choice="required"), llama)  # sent as auto
    assert can_stream(_request(tools=(SEARCH,)), GENERIC)
