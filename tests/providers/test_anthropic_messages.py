"""The Chat Completions shapes in Anthropic's Messages API and back: the
pure translation of registry/providers/anthropic_messages.py, rule by rule."""

from __future__ import annotations

import json
from typing import Any

import pytest

from registry.errors import ModelError
from registry.providers.anthropic_messages import (
    OPENING_TURN,
    OUTPUT_DESCRIPTION,
    OutputTool,
    StreamAssembly,
    conversation,
    output_definition,
    read_message,
    to_messages_call,
    tool_choice_of,
    tool_definition,
    tool_input,
    tool_plan,
)
from registry.providers.chat import ChatReply, ChatRequest, ResponseFormat, ToolCallRequest, Usage

SEARCH = {
    "type": "function",
    "function": {"name": "search", "description": "Searches.", "parameters": {"type": "object", "properties": {}}},
}
LABEL = {"type": "object", "required": ["label"], "properties": {"label": {"type": "string"}}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- messages ------------------------------------------------------------------------------


def test_system_messages_become_the_system_text_joined_wherever_they_stand() -> None:
    system, turns = conversation(
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Answer in French."},
        ]
    )
    assert system == "You are terse.\n\nAnswer in French."
    assert turns == [user(text("hi"))]


def test_no_system_message_is_no_system_text() -> None:
    assert conversation([{"role": "user", "content": "hi"}])[0] is None


def test_user_and_assistant_turns_become_text_blocks() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "and 3+3?"},
        ]
    )
    assert turns == [user(text("2+2?")), assistant(text("4")), user(text("and 3+3?"))]


def test_consecutive_turns_of_one_role_are_merged() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "third"},
        ]
    )
    assert turns == [user(text("first"), text("second")), assistant(text("a"), text("b")), user(text("third"))]


def test_tool_calls_become_tool_use_blocks_after_the_text_and_tool_results_one_user_turn() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "find both"},
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [call("c1", "search", '{"q": "a"}'), call("c2", "search", '{"q": "b"}')],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found a"},
            {"role": "tool", "tool_call_id": "c2", "content": "found b"},
        ]
    )
    assert turns == [
        user(text("find both")),
        assistant(
            text("Looking."),
            {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "a"}},
            {"type": "tool_use", "id": "c2", "name": "search", "input": {"q": "b"}},
        ),
        user(
            {"type": "tool_result", "tool_use_id": "c1", "content": "found a"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "found b"},
        ),
    ]


def test_an_assistant_turn_of_tool_calls_only_has_no_text_block() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call("c", "s", "{}")]},
        ]
    )
    assert turns[1] == assistant({"type": "tool_use", "id": "c", "name": "s", "input": {}})


def test_tool_results_come_first_in_a_turn_merged_with_user_text() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [call("c1", "s", "{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
            {"role": "user", "content": "Now answer."},
        ]
    )
    assert turns[2] == user({"type": "tool_result", "tool_use_id": "c1", "content": "done"}, text("Now answer."))


def test_an_empty_tool_result_is_sent_without_content() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [call("c1", "s", "{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": ""},
        ]
    )
    assert turns[2] == user({"type": "tool_result", "tool_use_id": "c1"})


@pytest.mark.parametrize(
    ("arguments", "sent"),
    [
        ('{"q": "deploy tokens"}', {"q": "deploy tokens"}),
        ("", {}),
        ("  ", {}),
        (None, {}),
        ('{"q": ', {"_raw": '{"q": '}),
        ("[1, 2]", {"_raw": "[1, 2]"}),
        ('"text"', {"_raw": '"text"'}),
    ],
)
def test_tool_call_arguments_are_an_object_and_anything_else_is_kept_raw(arguments: Any, sent: dict[str, Any]) -> None:
    assert tool_input(arguments) == sent


def test_a_conversation_that_starts_with_the_assistant_gets_an_opening_user_turn() -> None:
    _, turns = conversation([{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "hi"}])
    assert turns == [user(text(OPENING_TURN)), assistant(text("Hello!")), user(text("hi"))]


def test_a_system_prompt_alone_gets_an_opening_user_turn() -> None:
    system, turns = conversation([{"role": "system", "content": "Write a haiku about git."}])
    assert system == "Write a haiku about git."
    assert turns == [user(text(OPENING_TURN))]


def test_empty_and_whitespace_text_is_left_out_and_an_empty_turn_with_it() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "  \n"},
            {"role": "user", "content": ""},
            {"role": "user", "content": "again"},
        ]
    )
    assert turns == [user(text("hi"), text("again"))]


def test_a_last_assistant_turn_loses_its_trailing_whitespace() -> None:
    _, turns = conversation([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is \n"}])
    assert turns[-1] == assistant(text("The answer is"))


def test_earlier_assistant_turns_keep_their_whitespace() -> None:
    _, turns = conversation(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello \n"},
            {"role": "user", "content": "bye"},
        ]
    )
    assert turns[1] == assistant(text("Hello \n"))


def test_text_parts_become_text_blocks() -> None:
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert conversation([{"role": "user", "content": parts}])[1] == [user(text("one"), text("two"))]


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            "a message has a content part of type 'image_url'; only text is translated",
        ),
        ({"role": "user", "content": 5}, "a message's content is a int, not text"),
        (
            {"role": "developer", "content": "x"},
            "a message has the role 'developer', not system, user, assistant or tool",
        ),
        ({"role": "assistant", "tool_calls": [{"id": "c"}]}, "an assistant's tool call has no function"),
    ],
)
def test_a_message_that_cannot_be_translated_is_one_clear_error(message: dict[str, Any], why: str) -> None:
    with pytest.raises(ModelError) as caught:
        conversation([message])
    assert str(caught.value) == f"the request cannot be sent to Anthropic: {why}"


# --- tools ---------------------------------------------------------------------------------


def test_a_function_tool_becomes_name_description_and_input_schema() -> None:
    assert tool_definition(SEARCH) == {
        "name": "search",
        "description": "Searches.",
        "input_schema": {"type": "object", "properties": {}},
    }


def test_a_tool_without_parameters_or_description_takes_no_input() -> None:
    tool = {"type": "function", "function": {"name": "now"}}
    assert tool_definition(tool) == {"name": "now", "input_schema": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        (None, {"type": "auto"}),
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("search", {"type": "tool", "name": "search"}),
    ],
)
def test_tool_choice_in_anthropics_terms(choice: str | None, sent: dict[str, Any]) -> None:
    assert tool_choice_of(choice) == sent


def test_without_tools_no_tool_choice_is_sent() -> None:
    assert tool_plan([], "auto", None) == ([], None, None)


def test_structured_output_alone_is_a_forced_output_tool() -> None:
    tools, choice, output = tool_plan([], None, ResponseFormat(LABEL, "label"))
    assert tools == [{"name": "label", "description": OUTPUT_DESCRIPTION, "input_schema": LABEL}]
    assert choice == {"type": "tool", "name": "label"}
    assert output == OutputTool("label")


@pytest.mark.parametrize("choice", [None, "auto"])
def test_structured_output_beside_tools_makes_the_model_call_a_tool_or_answer(choice: str | None) -> None:
    tools, sent, output = tool_plan([SEARCH], choice, ResponseFormat(LABEL, "label"))
    assert [tool["name"] for tool in tools] == ["search", "label"]
    assert sent == {"type": "any"}
    assert output == OutputTool("label")


def test_structured_output_with_tool_choice_none_forces_the_answer() -> None:
    tools, sent, output = tool_plan([SEARCH], "none", ResponseFormat(LABEL, "label"))
    assert [tool["name"] for tool in tools] == ["search", "label"]
    assert (sent, output) == ({"type": "tool", "name": "label"}, OutputTool("label"))


@pytest.mark.parametrize(
    ("choice", "sent"), [("required", {"type": "any"}), ("search", {"type": "tool", "name": "search"})]
)
def test_a_round_that_must_call_a_tool_is_offered_no_output_tool(choice: str, sent: dict[str, Any]) -> None:
    tools, chosen, output = tool_plan([SEARCH], choice, ResponseFormat(LABEL, "label"))
    assert ([tool["name"] for tool in tools], chosen, output) == (["search"], sent, None)


def test_a_response_format_without_a_schema_asks_for_nothing() -> None:
    assert tool_plan([], None, ResponseFormat(None)) == ([], None, None)


def test_the_output_tool_never_takes_an_offered_tools_name_nor_an_invalid_one() -> None:
    taken = {"type": "function", "function": {"name": "label"}}
    tools, _, output = tool_plan([taken], None, ResponseFormat(LABEL, "label"))
    assert output == OutputTool("label_reply")
    assert tool_plan([], None, ResponseFormat(LABEL, "my schema.v1"))[2] == OutputTool("my_schema_v1")


def test_a_schema_that_is_not_an_object_is_wrapped_with_its_definitions_at_the_root() -> None:
    schema = {"type": "array", "items": {"$ref": "#/$defs/item"}, "$defs": {"item": {"type": "string"}}}
    definition, wrapped = output_definition("items", schema)
    assert wrapped
    assert definition["input_schema"] == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
        "required": ["value"],
        "$defs": {"item": {"type": "string"}},
    }


# --- the whole call ----------------------------------------------------------------------------


def _call(**fields: Any) -> Any:
    request = ChatRequest(model="claude-x", messages=({"role": "user", "content": "hi"},), **fields)
    return to_messages_call(request, kind="anthropic", default_max_tokens=4096)


def test_max_tokens_is_the_definitions_or_the_default() -> None:
    assert _call().max_tokens == 4096
    assert _call(params={"max_tokens": 100}).max_tokens == 100


def test_stop_becomes_stop_sequences_and_one_string_a_list_of_one() -> None:
    assert _call(params={"stop": "END"}).stop_sequences == ("END",)
    assert _call(params={"stop": ["A", "B"]}).stop_sequences == ("A", "B")
    assert _call().stop_sequences is None


def test_sampling_parameters_the_api_refuses_are_dropped_with_those_it_never_took() -> None:
    made = _call(params={"temperature": 0.2, "top_p": 0.9, "top_k": 40, "seed": 7, "max_tokens": 50})
    assert set(made.dropped) == {"temperature", "top_p", "top_k", "seed"}
    assert made.body() == {
        "model": "claude-x",
        "max_tokens": 50,
        "messages": [user(text("hi"))],
    }


def test_the_body_carries_system_tools_tool_choice_and_stop_sequences() -> None:
    made = to_messages_call(
        ChatRequest(
            model="claude-x",
            messages=({"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}),
            tools=(SEARCH,),
            tool_choice="search",
            params={"stop": ["END"]},
        ),
        kind="anthropic_bedrock",
        default_max_tokens=10,
    )
    assert made.body() == {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": [user(text("hi"))],
        "system": "Be brief.",
        "tools": [tool_definition(SEARCH)],
        "tool_choice": {"type": "tool", "name": "search"},
        "stop_sequences": ["END"],
    }
    assert made.adjustments == ()  # a translation that keeps the meaning is no adjustment


# --- what is sent otherwise than asked ---------------------------------------------------------


def _said(made: Any) -> list[tuple[str, str]]:
    return [(item.subject, item.detail) for item in made.adjustments]


def test_a_request_sent_as_asked_has_no_adjustments() -> None:
    assert _call(tools=(SEARCH,), tool_choice="required", params={"stop": "END"}).adjustments == ()


def test_structured_output_alone_says_it_was_sent_as_a_forced_tool() -> None:
    assert _said(_call(response_format=ResponseFormat(LABEL, "label"))) == [
        ("response_format", "response_format was sent as the tool label, forced"),
    ]


def test_structured_output_beside_tools_says_auto_was_sent_as_any() -> None:
    assert _said(_call(tools=(SEARCH,), tool_choice="auto", response_format=ResponseFormat(LABEL, "label"))) == [
        ("response_format", "response_format was sent as the tool label, beside the tools offered"),
        ("tool_choice", "tool_choice auto was sent as any: the model calls a tool or answers through label"),
    ]


def test_structured_output_with_tool_choice_none_says_the_output_tool_was_forced() -> None:
    assert _said(_call(tools=(SEARCH,), tool_choice="none", response_format=ResponseFormat(LABEL, "label"))) == [
        ("response_format", "response_format was sent as the tool label, forced"),
        ("tool_choice", "tool_choice none was sent as the tool label, forced"),
    ]


def test_a_wrapped_schema_says_so() -> None:
    made = _call(response_format=ResponseFormat({"type": "array", "items": {"type": "string"}}, "items"))
    assert _said(made) == [
        (
            "response_format",
            "response_format was sent as the tool items, the schema wrapped as its property value"
            " (it takes only objects), forced",
        ),
    ]


def test_structured_output_not_asked_for_says_why() -> None:
    assert _said(_call(response_format=ResponseFormat(None))) == [
        ("response_format", "response_format json_object was not sent: Anthropic has no JSON mode"),
    ]
    assert _said(_call(tools=(SEARCH,), tool_choice="search", response_format=ResponseFormat(LABEL))) == [
        ("response_format", "response_format was not sent: tool_choice search makes the round a tool call"),
    ]


def test_an_opening_turn_added_says_so_and_one_the_request_had_does_not() -> None:
    opened = to_messages_call(
        ChatRequest(model="claude-x", messages=({"role": "system", "content": "Write a haiku."},)),
        kind="anthropic",
        default_max_tokens=10,
    )
    assert _said(opened) == [("messages", "a first user turn 'Begin.' was added: Anthropic needs one")]
    begun = to_messages_call(
        ChatRequest(model="claude-x", messages=({"role": "user", "content": OPENING_TURN},)),
        kind="anthropic",
        default_max_tokens=10,
    )
    assert begun.adjustments == ()


# --- replies -------------------------------------------------------------------------------


def _message(*content: dict[str, Any], **fields: Any) -> dict[str, Any]:
    base = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": list(content),
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return {**base, **fields}


def test_a_text_reply_is_its_text_blocks_joined_with_usage_model_finish_and_id() -> None:
    reply = read_message(_message(text("Hello, "), text("world")), None)
    assert reply == ChatReply(
        content="Hello, world",
        usage=Usage(10, 5),
        model="claude-x",
        finish_reason="stop",
        response_id="msg_1",
    )


def test_tool_use_blocks_are_tool_calls_with_their_input_as_json() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "café"}}
    reply = read_message(_message(text("Let me look."), use, stop_reason="tool_use"), None)
    assert reply.content == "Let me look."
    assert reply.tool_calls == (ToolCallRequest("toolu_1", "search", '{"q": "café"}'),)
    assert reply.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
        (None, None),
    ],
)
def test_stop_reason_is_said_in_chat_completions_words(stop: str | None, finish: str | None) -> None:
    assert read_message(_message(text("x"), stop_reason=stop), None).finish_reason == finish


def test_the_input_tokens_count_those_written_to_and_read_from_the_cache() -> None:
    usage = {"input_tokens": 3, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 7, "output_tokens": 2}
    assert read_message(_message(text("x"), usage=usage), None).usage == Usage(110, 2)


def test_thinking_and_other_blocks_are_left_out() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "s"}
    assert read_message(_message(thinking, text("42")), None).content == "42"


def test_the_output_tools_input_is_the_content_and_not_a_tool_call() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "label", "input": {"label": "billing"}}
    reply = read_message(_message(text("Sure."), use, stop_reason="tool_use"), OutputTool("label"))
    assert json.loads(reply.content) == {"label": "billing"}
    assert (reply.tool_calls, reply.finish_reason) == ((), "stop")


def test_a_wrapped_output_is_unwrapped_and_one_without_its_value_given_as_written() -> None:
    use = {"type": "tool_use", "id": "t", "name": "items", "input": {"value": ["a", "b"]}}
    assert read_message(_message(use), OutputTool("items", wrapped=True)).content == '["a", "b"]'
    bare = {"type": "tool_use", "id": "t", "name": "items", "input": {"other": 1}}
    assert read_message(_message(bare), OutputTool("items", wrapped=True)).content == '{"other": 1}'


def test_a_real_tool_called_beside_the_output_tool_stays_a_call() -> None:
    uses = [
        {"type": "tool_use", "id": "t1", "name": "search", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "label", "input": {"label": "tech"}},
    ]
    reply = read_message(_message(*uses, stop_reason="tool_use"), OutputTool("label"))
    assert reply.tool_calls == (ToolCallRequest("t1", "search", "{}"),)
    assert reply.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ([], "it is a JSON list, not an object"),
        ({"type": "message"}, "it has no content list"),
        ({"content": "text"}, "it has no content list"),
        ({"content": ["x"]}, "a content block is not an object"),
        ({"content": [{"type": "text"}]}, "a text block has no text text"),
        ({"content": [{"type": "tool_use", "name": "s", "input": {}}]}, "a tool_use block has no id text"),
        (
            {"content": [{"type": "tool_use", "id": "t", "name": "s", "input": []}]},
            "the input of tool_use 's' is not an object",
        ),
    ],
)
def test_a_body_that_is_not_a_message_is_malformed(data: Any, why: str) -> None:
    with pytest.raises(ModelError) as caught:
        read_message(data, None)
    assert caught.value.reason == "malformed"
    assert str(caught.value) == f"the model endpoint's reply is not a Messages API message: {why}"


# --- streams -------------------------------------------------------------------------------


def _stream(*middle: dict[str, Any], stop_reason: str = "end_turn") -> list[dict[str, Any]]:
    start = _message(usage={"input_tokens": 10, "output_tokens": 1}, stop_reason=None)
    return [
        {"type": "message_start", "message": start},
        {"type": "ping"},
        *middle,
        {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]


def _start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def _feed(events: list[dict[str, Any]], output: OutputTool | None = None) -> tuple[list[str], ChatReply]:
    assembly = StreamAssembly(output)
    texts = [piece for event in events if (piece := assembly.feed(event))]
    return texts, assembly.reply()


TEXT = [
    _start(0, text("")),
    _delta(0, {"type": "text_delta", "text": "Hel"}),
    _delta(0, {"type": "text_delta", "text": "lo"}),
    _stop(0),
]
TOOL = [
    _start(1, {"type": "tool_use", "id": "toolu_9", "name": "search", "input": {}}),
    _delta(1, {"type": "input_json_delta", "partial_json": '{"q": "de'}),
    _delta(1, {"type": "input_json_delta", "partial_json": 'ploy"}'}),
    _stop(1),
]


def test_a_streamed_text_comes_delta_by_delta_and_whole_at_the_end() -> None:
    texts, reply = _feed(_stream(*TEXT))
    assert texts == ["Hel", "lo"]
    assert reply == ChatReply("Hello", usage=Usage(10, 7), model="claude-x", finish_reason="stop", response_id="msg_1")


def test_a_streamed_tool_use_is_assembled_from_its_json_deltas() -> None:
    texts, reply = _feed(_stream(*TEXT, *TOOL, stop_reason="tool_use"))
    assert texts == ["Hel", "lo"]
    assert reply.tool_calls == (ToolCallRequest("toolu_9", "search", '{"q": "deploy"}'),)
    assert reply.finish_reason == "tool_calls"


def test_a_tool_use_with_no_input_deltas_has_an_empty_input() -> None:
    events = [_start(0, {"type": "tool_use", "id": "t", "name": "now", "input": {}}), _stop(0)]
    assert _feed(_stream(*events))[1].tool_calls == (ToolCallRequest("t", "now", "{}"),)


def test_with_an_output_tool_no_text_is_passed_on_and_the_content_is_its_input() -> None:
    events = [
        _start(0, {"type": "tool_use", "id": "t", "name": "label", "input": {}}),
        _delta(0, {"type": "input_json_delta", "partial_json": '{"label": "tech"}'}),
        _stop(0),
    ]
    texts, reply = _feed(_stream(*TEXT, *[{**e, "index": 1} for e in events]), OutputTool("label"))
    assert texts == []
    assert (json.loads(reply.content), reply.tool_calls) == ({"label": "tech"}, ())


def test_events_of_unknown_types_and_deltas_are_skipped() -> None:
    texts, reply = _feed(
        _stream(
            {"type": "brand_new_event", "data": 1},
            _start(0, {"type": "thinking", "thinking": ""}),
            _delta(0, {"type": "thinking_delta", "thinking": "hmm"}),
            _stop(0),
            *[{**e, "index": 1} for e in TEXT],
        )
    )
    assert (texts, reply.content) == (["Hel", "lo"], "Hello")


def test_a_stream_that_never_stops_ended_early() -> None:
    assembly = StreamAssembly(None)
    for event in _stream(*TEXT)[:-1]:
        assembly.feed(event)
    with pytest.raises(ModelError) as caught:
        assembly.reply()
    assert caught.value.reason == "connection"
    assert str(caught.value) == "the model endpoint's stream ended early, before message_stop"


@pytest.mark.parametrize(
    ("event", "why"),
    [
        ("text", "a stream event is not an object with a type"),
        ({"no": "type"}, "a stream event is not an object with a type"),
        ({"type": "message_start"}, "message_start has no message"),
        ({"type": "content_block_start", "index": 0}, "content_block_start has no content_block"),
        (_start(True, text("")), "content_block_start has no index"),
        (_delta(3, {"type": "text_delta", "text": "x"}), "content_block_delta 3 has no delta or no block started"),
    ],
)
def test_a_malformed_event_is_malformed(event: Any, why: str) -> None:
    with pytest.raises(ModelError) as caught:
        StreamAssembly(None).feed(event)
    assert caught.value.reason == "malformed"
    assert str(caught.value) == f"the model endpoint's reply is not a Messages API message: {why}"


def test_a_tool_input_that_is_not_a_json_object_is_malformed() -> None:
    assembly = StreamAssembly(None)
    assembly.feed(_start(0, {"type": "tool_use", "id": "t", "name": "s", "input": {}}))
    assembly.feed(_delta(0, {"type": "input_json_delta", "partial_json": '{"q": '}))
    with pytest.raises(ModelError) as caught:
        assembly.feed(_stop(0))
    assert (
        str(caught.value)
        == "the model endpoint's reply is not a Messages API message: the input of tool_use 's' is not JSON"
    )
