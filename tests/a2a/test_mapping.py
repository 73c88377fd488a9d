"""Our tasks, actions, artifacts and log entries as A2A's types, each checked
against the specification's schema as the SDK derives it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from a2a.types import Artifact, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Value

from registry.a2a import mapping
from registry.a2a.faults import translated
from registry.errors import InvalidInputs, InvalidState, PayloadTooLarge, StoreError, TaskNotFound
from registry.models import Issue
from registry.protocol import events
from registry.protocol.records import ActionRecord, ArtifactRecord, TaskEvent, TaskRecord
from registry.protocol.states import TASK_STATES
from tests.support.a2a_schema import check_against_spec

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
TASK = TaskRecord(
    task_id="t-1",
    owner="anonymous",
    input="ox?",
    additional_input={"agent": "a/react", "mode": "background"},
    agent="a/react",
    release_requested="^1",
    release_tag="v1.0.0",
    release_commit="c" * 40,
    digest="sha256:" + "d" * 64,
    inputs={"question": "ox?"},
    status="waiting_for_input",
    created_at=NOW,
    updated_at=NOW,
    mode="background",
)
ACTION = ActionRecord(
    action_id="a-1",
    task_id="t-1",
    step_id="s-1",
    key="k",
    agent="a/react",
    tool="lookup",
    arguments={"word": "ox"},
    thought="look it up",
    status="pending",
    created_at=NOW,
)


def stored(name: str, *, agent_created: bool, size: int = 5) -> ArtifactRecord:
    return ArtifactRecord(
        artifact_id="f-" + name,
        task_id="t-1",
        agent_created=agent_created,
        file_name=name,
        relative_path=None,
        content_type="text/markdown; charset=utf-8" if name.endswith(".md") else "application/octet-stream",
        size=size,
        sha256="e" * 64,
        created_at=NOW,
        step_id="s-1" if agent_created else None,
    )


@pytest.mark.parametrize("status", [*TASK_STATES, "queued", "rejected"])
def test_every_internal_state_has_an_a2a_state(status: str) -> None:
    shown = mapping.task_status(status, updated_at=NOW, pending=ACTION, error="it broke")
    check_against_spec(MessageToDict(shown), TaskStatus)
    assert shown.state != TaskState.TASK_STATE_UNSPECIFIED


def test_a_state_this_module_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'paused'.*STATES"):
        mapping.a2a_state("paused")


def test_the_states_map_as_the_table_says() -> None:
    names = {status: TaskState.Name(state) for status, state in mapping.STATES.items()}
    assert names == {
        "created": "TASK_STATE_SUBMITTED",
        "queued": "TASK_STATE_SUBMITTED",
        "running": "TASK_STATE_WORKING",
        "waiting_for_input": "TASK_STATE_INPUT_REQUIRED",
        "completed": "TASK_STATE_COMPLETED",
        "failed": "TASK_STATE_FAILED",
        "cancelled": "TASK_STATE_CANCELED",
        "rejected": "TASK_STATE_REJECTED",
    }


def test_a_pending_action_is_input_required_with_the_tool_call_as_a_data_part() -> None:
    status = mapping.task_status("waiting_for_input", updated_at=NOW, pending=ACTION)
    text, data = status.message.parts
    assert "lookup" in text.text and "approve" in text.text
    assert mapping.plain(data.data) == {
        "action": {
            "action_id": "a-1",
            "agent": "a/react",
            "tool": "lookup",
            "arguments": {"word": "ox"},
            "thought": "look it up",
        }
    }
    assert data.media_type == "application/json"


def test_a_waiting_task_without_an_action_says_it_waits_for_a_step() -> None:
    status = mapping.task_status("waiting_for_input", updated_at=NOW)
    [text] = status.message.parts
    assert "next step" in text.text


def test_a_failed_task_says_why_and_a_working_one_says_nothing() -> None:
    failed = mapping.task_status("failed", updated_at=NOW, error="the model is away")
    assert [p.text for p in failed.message.parts] == ["the model is away"]
    assert not mapping.task_status("running", updated_at=NOW, error="old").HasField("message")


def test_the_answer_is_a_text_part_and_other_files_bytes_or_a_link() -> None:
    answer = mapping.artifact(stored("answer.md", agent_created=True), b"an animal", url="http://x/a")
    [part] = answer.parts
    assert (part.text, part.filename, answer.name) == ("an animal", "answer.md", "answer.md")
    small = mapping.artifact(stored("notes.bin", agent_created=False), b"\x00\x01", url="http://x/n")
    assert small.parts[0].raw == b"\x00\x01"
    large = mapping.artifact(stored("big.bin", agent_created=True, size=10**7), None, url="http://x/big")
    assert large.parts[0].url == "http://x/big"
    assert mapping.struct_plain(large.metadata)["size"] == 10**7
    for shown in (answer, small, large):
        check_against_spec(MessageToDict(shown), Artifact)


def test_a_task_pins_its_release_in_its_metadata_and_is_its_own_context() -> None:
    status = mapping.task_status(TASK.status, updated_at=NOW, pending=ACTION)
    artifact = mapping.artifact(stored("answer.md", agent_created=True), b"an animal", url="http://x/a")
    shown = mapping.task(TASK, status, [artifact])
    check_against_spec(MessageToDict(shown), Task)
    assert shown.context_id == shown.id == "t-1"
    assert mapping.struct_plain(shown.metadata) == {
        "agent": "a/react",
        "release": {"requested": "^1", "tag": "v1.0.0", "commit": "c" * 40},
        "digest": "sha256:" + "d" * 64,
        "mode": "background",
        "outcome": None,
    }


def entry(kind: str, seq: int, **data: object) -> TaskEvent:
    return TaskEvent(task_id="t-1", seq=seq, kind=kind, data=dict(data), created_at=NOW)


def test_model_text_and_tool_calls_are_working_updates_and_other_entries_are_not_progress() -> None:
    text = mapping.progress_update(entry(events.TEXT, 3, step_id="s", agent="a/react", delta="Thought: "))
    call = mapping.progress_update(
        entry(events.TOOL_CALL, 4, step_id="s", agent="a/react", tool="lookup", call_id="c", arguments={"word": "ox"})
    )
    assert text is not None and call is not None
    assert text.status.state == call.status.state == TaskState.TASK_STATE_WORKING
    assert text.status.message.parts[0].text == "Thought: "
    assert mapping.plain(call.status.message.parts[0].data) == {
        "tool_call": {"agent": "a/react", "tool": "lookup", "call_id": "c", "arguments": {"word": "ox"}}
    }
    assert mapping.struct_plain(call.metadata) == {"seq": 4, "kind": "tool_call", "agent": "a/react"}
    for update in (text, call):
        check_against_spec(MessageToDict(update), TaskStatusUpdateEvent)
    for kind in (events.STATE, events.STEP, events.ACTION, events.OUTCOME, events.ARTIFACT):
        assert mapping.progress_update(entry(kind, 5)) is None


def test_state_and_artifact_updates_carry_their_log_number() -> None:
    status = mapping.status_update("t-1", mapping.task_status("completed", updated_at=NOW), seq=9)
    artifact = mapping.artifact(stored("answer.md", agent_created=True), b"an animal", url="http://x/a")
    update = mapping.artifact_update("t-1", artifact, seq=8)
    check_against_spec(MessageToDict(status), TaskStatusUpdateEvent)
    check_against_spec(MessageToDict(update), TaskArtifactUpdateEvent)
    assert mapping.struct_plain(status.metadata)["seq"] == 9 and update.last_chunk


def test_whole_numbers_come_back_as_ints_and_the_rest_as_they_were() -> None:
    value = Value()
    value.struct_value.update({"count": 3, "ratio": 0.5, "tags": ["a", 2], "deep": {"none": None, "yes": True}})
    assert mapping.plain(value) == {"count": 3, "ratio": 0.5, "tags": ["a", 2], "deep": {"none": None, "yes": True}}
    assert type(mapping.plain(value)["count"]) is int


def test_the_services_errors_become_a2a_errors() -> None:
    assert type(translated(TaskNotFound("no task 'x'"))).__name__ == "TaskNotFoundError"
    conflict = InvalidState("the task is completed", entity="task", state="completed", allowed=[])
    assert type(translated(conflict, cancelling=True)).__name__ == "TaskNotCancelableError"
    assert type(translated(conflict)).__name__ == "UnsupportedOperationError"
    refused = translated(InvalidInputs("bad inputs", [Issue(message="missing question", path="/inputs")]))
    assert type(refused).__name__ == "InvalidParamsError"
    assert refused.data == {"errors": [{"field": "/inputs", "message": "missing question"}]}
    assert type(translated(PayloadTooLarge("too big"))).__name__ == "InvalidRequestError"
    assert translated(StoreError("the task store failed: gone")).message == "the task store failed: gone"
