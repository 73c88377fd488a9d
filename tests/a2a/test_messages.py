"""What an incoming A2A message may say: a task request or a decision, and
each hostile message refused with one InvalidParamsError naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import Message, Part, Role
from a2a.utils.errors import InvalidParamsError
from google.protobuf.struct_pb2 import Value

from registry.a2a import messages
from registry.a2a.messages import Decision, Limits
from registry.protocol.records import Upload

LIMITS = Limits(text_bytes=1000, file_bytes=100, parts=8)


def data(value: dict[str, Any]) -> Part:
    found = Value()
    found.struct_value.update(value)
    return Part(data=found)


def message(*parts: Part, **metadata: Any) -> Message:
    found = Message(message_id="m-1", role=Role.ROLE_USER, parts=list(parts))
    found.metadata.update(metadata)
    return found


def refused(given: Message, *, endpoint_agent: str | None = None, decision: bool = False) -> InvalidParamsError:
    with pytest.raises(InvalidParamsError) as caught:
        if decision:
            messages.decision(given, limits=LIMITS)
        else:
            messages.task_request(given, endpoint_agent=endpoint_agent, limits=LIMITS)
    error = caught.value
    assert error.data is not None and error.data["errors"][0]["message"] == error.message
    return error


def test_text_parts_are_the_input_a_data_part_the_inputs_and_metadata_the_agent() -> None:
    request = messages.task_request(
        message(Part(text="How?"), Part(text="Briefly."), data({"question": "How?", "count": 3}), agent="s/draft"),
        endpoint_agent=None,
        limits=LIMITS,
    )
    assert request.text == "How?\nBriefly."
    assert request.inputs == {"question": "How?", "count": 3}
    assert request.body() == {
        "input": "How?\nBriefly.",
        "additional_input": {"agent": "s/draft", "mode": "background", "inputs": {"question": "How?", "count": 3}},
    }


def test_a_per_agent_endpoint_names_the_agent_and_metadata_may_only_agree() -> None:
    request = messages.task_request(message(Part(text="ox?"), release="^1"), endpoint_agent="a/react", limits=LIMITS)
    assert (request.agent, request.release, request.inputs) == ("a/react", "^1", None)
    same = messages.task_request(message(Part(text="ox?"), agent="a/react"), endpoint_agent="a/react", limits=LIMITS)
    assert same.agent == "a/react"
    other = refused(message(Part(text="ox?"), agent="s/draft"), endpoint_agent="a/react")
    assert "this endpoint runs a/react" in other.message


def test_the_service_wide_endpoint_needs_the_agent_named() -> None:
    error = refused(message(Part(text="ox?")))
    assert "metadata" in error.message and error.data == {
        "errors": [{"field": "message.metadata.agent", "message": error.message}]
    }


def test_an_unknown_metadata_key_is_refused_with_did_you_mean() -> None:
    error = refused(message(Part(text="ox?"), agent="a/react", relase="v1.0.0"))
    assert error.message == "the message's metadata has no member 'relase'; did you mean 'release'?"
    far = refused(message(Part(text="ox?"), agent="a/react", colour="blue"))
    assert far.message.endswith("it takes agent, release")


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..\\..\\etc\\passwd", "docs/../../x", ".."])
def test_a_file_part_whose_name_leaves_the_tasks_files_is_refused(name: str) -> None:
    error = refused(message(Part(raw=b"root:x:0:0", filename=name), agent="a/react"))
    assert error.data is not None and error.data["errors"][0]["field"] == "message.parts[0].filename"
    assert repr(name[:80]) in error.message


def test_a_file_part_is_an_upload_with_a_name_a_path_and_a_media_type() -> None:
    request = messages.task_request(
        message(
            Part(text="Read these."),
            Part(raw=b"# Notes", filename="docs/notes.md"),
            Part(raw=b"\x00", media_type="application/x-thing"),
            agent="a/react",
        ),
        endpoint_agent=None,
        limits=LIMITS,
    )
    assert request.uploads == (
        Upload("notes.md", "docs", "text/markdown", b"# Notes"),
        Upload("part-2", None, "application/x-thing", b"\x00"),
    )


def test_a_part_of_no_known_kind_a_url_and_too_much_are_refused() -> None:
    assert "a kind this service does not know" in refused(message(Part(), agent="a/react")).message
    assert "fetches nothing" in refused(message(Part(url="http://169.254.169.254/"), agent="a/react")).message
    assert "at most 100 bytes" in refused(message(Part(raw=b"x" * 101), agent="a/react")).message
    assert "at most 1000" in refused(message(Part(text="x" * 600), Part(text="y" * 600), agent="a/react")).message
    assert "at most 8 parts" in refused(message(*[Part(text="x")] * 9, agent="a/react")).message
    assert "at least one part" in refused(message(agent="a/react")).message


def test_inputs_are_one_data_part_holding_an_object() -> None:
    two = refused(message(data({"a": 1}), data({"b": 2}), agent="a/react"))
    assert "at most one data part" in two.message
    listed = Value()
    listed.list_value.extend([1, 2])
    assert "a JSON object" in refused(message(Part(data=listed), agent="a/react")).message


def test_a_decision_is_one_data_part_and_its_text_is_the_reason() -> None:
    assert messages.decision(message(data({"decision": "approve"})), limits=LIMITS) == Decision("approve")
    reject = messages.decision(message(Part(text="not that one"), data({"decision": "reject"})), limits=LIMITS)
    assert reject.as_mapping() == {"decision": "reject", "reason": "not that one"}
    edit = messages.decision(message(data({"decision": "edit", "arguments": {"word": "cow"}})), limits=LIMITS)
    assert edit.as_mapping() == {"decision": "edit", "arguments": {"word": "cow"}}


def test_a_bad_decision_is_refused_naming_what_is_wrong() -> None:
    assert (
        "did you mean 'reason'" in refused(message(data({"decision": "reject", "reasn": "x"})), decision=True).message
    )
    assert "approve, reject or edit" in refused(message(data({"decision": "maybe"})), decision=True).message
    assert "an edit needs arguments" in refused(message(data({"decision": "edit"})), decision=True).message
    assert "one data part" in refused(message(Part(text="approve")), decision=True).message
    file_too = message(data({"decision": "approve"}), Part(raw=b"x", filename="a.txt"))
    assert "one data part" in refused(file_too, decision=True).message
