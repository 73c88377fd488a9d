"""The model interface's values: a reply as a journal keeps it (``as_dict``)
comes back whole (``from_dict``), what its adapter adjusted included."""

from __future__ import annotations

from registry.providers.chat import Adjustment, ChatReply, ServedBy, ToolCallRequest, Usage


def test_a_reply_comes_back_from_its_dict_with_its_adjustments() -> None:
    reply = ChatReply(
        content="",
        tool_calls=(ToolCallRequest("call_1", "search", '{"query": "x"}'),),
        usage=Usage(10, 5),
        model="smollm2",
        finish_reason="tool_calls",
        response_id="chatcmpl-1",
        served_by=ServedBy("local", "openai_compatible", "smollm2"),
        adjustments=(Adjustment("tool_choice", "tool_choice required was sent as auto: llama.cpp refuses required"),),
    )
    assert reply.as_dict()["adjustments"] == [
        {"subject": "tool_choice", "detail": "tool_choice required was sent as auto: llama.cpp refuses required"}
    ]
    assert ChatReply.from_dict(reply.as_dict()) == reply


def test_a_reply_sent_as_asked_has_no_adjustments_in_its_dict() -> None:
    reply = ChatReply("hi", finish_reason="stop")
    assert "adjustments" not in reply.as_dict()
    assert ChatReply.from_dict(reply.as_dict()) == reply
