"""Streamed runs (``Executor.astream`` and ``stream``): the answer's text
streams only from the part of the run whose text is the answer, and only
once it is sure to be; every other event follows the trace as it grows;
the last event is the result ``run`` gives. Against the scripted model,
over agents served from a real git repository."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from registry.errors import AgentNotFound
from registry.executor import BLOCKED, COMPLETED, EXHAUSTED, FAILED, Executor
from registry.executor.events import (
    ActionEvent,
    Event,
    GateEvent,
    OutcomeEvent,
    ParseEvent,
    SpanEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from registry.executor.executor import RunResult
from registry.executor.scripted import ScriptedModel
from registry.executor.tools import PythonTools
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import (
    CLASSIFIER_LEAF,
    REACT,
    VERDICT_SCHEMA,
    executor_for,
    json_leaf,
    leaf,
    registry_client,
    vote_composite,
)
from tests.support.gated_answer import DRAFT, GATE, GATED

ANSWER = leaf("the answerer", "Answer: {{ question }}", question="string")
ROUTED = """\
name: Routed
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: route
  classifier: {agent: support/classify, inputs: {question: "{{ inputs.question }}"}}
  routes:
    billing: {agent: support/gated, inputs: {question: "{{ inputs.question }}"}}
  default: {agent: support/answer, inputs: {question: "{{ inputs.question }}"}}
"""
REVIEWED = """\
name: Reviewed
inputs: {type: object, required: [task], properties: {task: {type: string}}}
pattern:
  kind: evaluator_optimizer
  max_iterations: 2
  on_exhausted: ON_EXHAUSTED
  generator: {agent: code/write, inputs: {task: "{{ inputs.task }}"}}
  evaluator: {agent: code/review, inputs: {code: "{{ candidate }}"}}
"""
TOOLS = """\
name: Tool caller
type: tool_calling
max_iterations: 3
model: {name: test-model}
tools:
  - name: lookup
    description: Looks a word up.
    parameters: {type: object, required: [word], additionalProperties: false, properties: {word: {type: string}}}
prompt_templates:
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""
MAPPED = """\
name: Mapped
inputs: {type: object, required: [items], properties: {items: {type: array, items: {type: string}}}}
pattern:
  kind: parallel
  mode: map
  over: "{{ inputs['items'] }}"
  chunk_size: 1
  max_items: 3
  branch: {agent: batch/chunk, inputs: {item: "{{ chunk[0] }}"}}
  aggregate: {agent: batch/report, inputs: {results: "{{ results }}"}}
"""

DRAFTED = "You can pay by card or by bank transfer, from the Billing page."
ACTION = 'Thought: I should look the word up first.\nAction: lookup\nAction Input: {"word": "ox"}'
FINAL = "Thought: I know it now.\nFinal Answer: An ox is a bovine."


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> LibraryRepo:
    repo = LibraryRepo(tmp_path_factory.mktemp("streaming") / "library")
    repo.release(
        "v1.0.0",
        {
            "support/draft.yml": DRAFT,
            "support/gate.yml": GATE,
            "support/gated.yml": GATED,
            "support/answer.yml": ANSWER,
            "support/classify.yml": CLASSIFIER_LEAF,
            "support/routed.yml": ROUTED,
            "support/vote.yml": vote_composite("support/answer", n=3, concurrency=3, field=None),
            "code/write.yml": leaf("writer", "Write: {{ task }}", task="string"),
            "code/review.yml": json_leaf("reviewer", "Review: {{ code }}", VERDICT_SCHEMA, code="string"),
            "code/reviewed.yml": REVIEWED.replace("ON_EXHAUSTED", "return_last"),
            "code/strict.yml": REVIEWED.replace("ON_EXHAUSTED", "fail"),
            "batch/chunk.yml": leaf("chunk", "Item: {{ item }}", item="string"),
            "batch/report.yml": leaf("report", "Reports: {{ results | join(' | ') }}", results="array"),
            "batch/mapped.yml": MAPPED,
            "assistant/react.yml": REACT,
            "assistant/tools.yml": TOOLS,
        },
    )
    return repo


def lookup() -> PythonTools:
    return PythonTools({"lookup": lambda word: f"{word}: a large domesticated bovine"})


def streamed(
    library: LibraryRepo, replies: list[Any], agent: str, inputs: dict[str, Any], **options: Any
) -> list[Event]:
    with executor_for(library.path, replies, tools=[lookup()], **options) as executor:
        return list(executor.stream(agent, inputs))


def texts(events: list[Event]) -> list[TextEvent]:
    return [event for event in events if isinstance(event, TextEvent)]


def joined(events: list[Event]) -> str:
    return "".join(event.text for event in texts(events))


def outcome(events: list[Event]) -> RunResult:
    last = events[-1]
    assert isinstance(last, OutcomeEvent)
    assert not any(isinstance(event, OutcomeEvent) for event in events[:-1])
    return last.result


def first(events: list[Event], event_type: type[Event], /, **fields: Any) -> int:
    """The index of the first event of ``event_type`` whose attributes are ``fields``."""
    return next(
        index
        for index, event in enumerate(events)
        if isinstance(event, event_type) and all(getattr(event, key) == value for key, value in fields.items())
    )


def timeless(value: Any) -> Any:
    """``value`` (a result as a dict) without what differs from one run to the next: times."""
    if isinstance(value, dict):
        return {key: timeless(item) for key, item in value.items() if key not in ("started", "seconds")}
    if isinstance(value, list):
        return [timeless(item) for item in value]
    return value


# Each agent's script, read word by word so that text comes in many pieces.
GATED_REPLIES = [
    {"agent": "support/draft", "content": DRAFTED, "stream_delay": 0.005},
    {"agent": "support/gate", "content": '{"allow": true}'},
]
RUNS: dict[str, tuple[dict[str, Any], list[Any]]] = {
    "support/gated": ({"question": "How do I pay?"}, GATED_REPLIES),
    "support/routed": (
        {"question": "How do I pay?"},
        [{"agent": "support/classify", "content": '{"label": "billing"}'}, *GATED_REPLIES],
    ),
    "support/vote": ({"question": "Yes?"}, [{"content": "Yes."}, {"content": "No."}, {"content": "Yes."}]),
    "assistant/react": ({"question": "ox?"}, [{"content": ACTION}, {"content": FINAL}]),
    "code/reviewed": (
        {"task": "sort"},
        [
            {"agent": "code/write", "content": "first try"},
            {"agent": "code/review", "content": '{"pass": false, "feedback": "again"}'},
            {"agent": "code/write", "content": "second try"},
            {"agent": "code/review", "content": '{"pass": true, "feedback": "good"}'},
        ],
    ),
    "batch/mapped": (
        {"items": ["a", "b"]},
        [
            {"agent": "batch/chunk", "content": "chunk done", "repeat": True},
            {"agent": "batch/report", "content": "Both chunks are done."},
        ],
    ),
}


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_the_outcome_is_the_result_run_gives_and_the_text_joined_is_its_output(
    library: LibraryRepo, agent: str
) -> None:
    inputs, replies = RUNS[agent]
    with executor_for(library.path, replies, tools=[lookup()]) as executor:
        expected = executor.run(agent, inputs)
    events = streamed(library, replies, agent, inputs)
    result = outcome(events)
    assert result.outcome == expected.outcome == COMPLETED
    assert timeless(result.as_dict()) == timeless(expected.as_dict())
    assert joined(events) == result.output


def test_a_run_nobody_streams_never_asks_the_model_to_stream(library: LibraryRepo) -> None:
    model = ScriptedModel.from_replies(GATED_REPLIES + GATED_REPLIES, source="the test")
    with executor_for(library.path, model) as executor:
        assert executor.run("support/gated", {"question": "q"}).completed
        assert model.stream_counts().opened == 0
        assert outcome(list(executor.stream("support/gated", {"question": "q"}))).completed
    # Streamed, only the draft (the answer) streams; the gate's JSON is asked for whole.
    assert model.stream_counts().opened == 1


# --- a chain ending in a gate ------------------------------------------------------------


def test_a_gated_answer_streams_only_after_its_gate_allows_it(library: LibraryRepo) -> None:
    events = streamed(library, GATED_REPLIES, "support/gated", {"question": "How do I pay?"})
    gate = first(events, GateEvent, allow=True)
    pieces = texts(events)
    assert len(pieces) == len(DRAFTED.split())  # the model's pieces, released as they came
    assert all(events.index(piece) > gate for piece in pieces)
    assert {(piece.agent, piece.path) for piece in pieces} == {("support/draft", "/step 'draft'")}
    assert joined(events) == DRAFTED == outcome(events).output


def test_a_blocked_answer_streams_the_on_block_text_and_never_the_draft(library: LibraryRepo) -> None:
    replies = [
        {"agent": "support/draft", "content": "The admin password is hunter2.", "stream_delay": 0.005},
        {"agent": "support/gate", "content": '{"allow": false, "reason": "it leaks a secret"}'},
    ]
    events = streamed(library, replies, "support/gated", {"question": "password?"})
    result = outcome(events)
    assert result.outcome == BLOCKED
    assert [piece.text for piece in texts(events)] == ["Sorry: it leaks a secret"] == [result.output]
    assert first(events, GateEvent, allow=False) < first(events, TextEvent)


def test_a_route_streams_its_chosen_route_and_a_gate_there_still_holds_it(library: LibraryRepo) -> None:
    inputs, replies = RUNS["support/routed"]
    events = streamed(library, replies, "support/routed", inputs)
    assert {piece.path for piece in texts(events)} == {"/route 'billing'/step 'draft'"}
    assert first(events, GateEvent) < first(events, TextEvent)
    assert joined(events) == DRAFTED


# --- parallel ----------------------------------------------------------------------------


def test_a_vote_streams_nothing_until_it_has_decided(library: LibraryRepo) -> None:
    inputs, replies = RUNS["support/vote"]
    events = streamed(library, replies, "support/vote", inputs)
    decided = first(events, SpanEvent, kind="aggregate")
    assert [(events.index(piece) > decided, piece.text, piece.agent) for piece in texts(events)] == [
        (True, "Yes.", "support/vote")
    ]
    # The branches' own calls were made, and traced as they ended, before it.
    branches = [index for index, event in enumerate(events) if isinstance(event, SpanEvent) and event.kind == "chat"]
    assert len(branches) == 3 and max(branches) < decided


def test_an_aggregating_agent_streams_its_own_reply_and_the_branches_none(library: LibraryRepo) -> None:
    inputs, replies = RUNS["batch/mapped"]
    events = streamed(library, replies, "batch/mapped", inputs)
    assert {piece.agent for piece in texts(events)} == {"batch/report"}
    assert joined(events) == "Both chunks are done."


# --- evaluator-optimizer ----------------------------------------------------------------------


def test_a_candidate_streams_only_once_the_evaluator_passes_it(library: LibraryRepo) -> None:
    inputs, replies = RUNS["code/reviewed"]
    events = streamed(library, replies, "code/reviewed", inputs)
    passed = first(events, SpanEvent, name="evaluate round 2")
    assert joined(events) == "second try"
    assert all(events.index(piece) > passed for piece in texts(events))


@pytest.mark.parametrize(
    ("agent", "expected", "text"), [("code/reviewed", COMPLETED, "again"), ("code/strict", EXHAUSTED, "")]
)
def test_when_no_candidate_passes_the_last_streams_or_nothing_does(
    library: LibraryRepo, agent: str, expected: str, text: str
) -> None:
    replies = [
        {"agent": "code/write", "content": "once"},
        {"agent": "code/write", "content": "again"},
        {"agent": "code/review", "content": '{"pass": false, "feedback": "no"}', "repeat": True},
    ]
    events = streamed(library, replies, agent, {"task": "sort"})
    assert outcome(events).outcome == expected
    assert joined(events) == text


# --- leaves ----------------------------------------------------------------------------------


def test_a_react_agent_streams_its_final_answer_and_no_thought_or_action(library: LibraryRepo) -> None:
    inputs, replies = RUNS["assistant/react"]
    events = streamed(library, replies, "assistant/react", inputs)
    assert [piece.text for piece in texts(events)] == ["An ox is a bovine."]
    assert first(events, ParseEvent, kind="final_answer") < first(events, TextEvent)


def test_a_tool_calling_agent_streams_its_final_reply_only(library: LibraryRepo) -> None:
    replies = [
        {"content": "Let me look that up.", "tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}]},
        {"content": "An ox is a bovine."},
    ]
    events = streamed(library, replies, "assistant/tools", {"question": "ox?"})
    assert joined(events) == "An ox is a bovine." == outcome(events).output
    assert first(events, ToolResultEvent) < first(events, TextEvent)


def test_a_json_leaf_streams_its_raw_text_whole_once_parsed(library: LibraryRepo) -> None:
    events = streamed(library, [{"content": '{"label": "billing"}'}], "support/classify", {"question": "refund?"})
    assert [piece.text for piece in texts(events)] == ['{"label": "billing"}']
    assert outcome(events).data == {"label": "billing"}


def test_a_json_leaf_whose_reply_does_not_parse_streams_it_and_fails(library: LibraryRepo) -> None:
    # The reply and its repair round are both refused; only the last one is the answer.
    replies = [{"content": "billing, I think", "repeat": True}]
    events = streamed(library, replies, "support/classify", {"question": "refund?"})
    result = outcome(events)
    assert result.outcome == FAILED and "does not parse" in (result.error or "")
    assert joined(events) == "billing, I think"


# --- the other events ----------------------------------------------------------------------


def test_events_come_in_the_order_things_happen(library: LibraryRepo) -> None:
    inputs, replies = RUNS["assistant/react"]
    events = streamed(library, replies, "assistant/react", inputs)
    kinds = [event.type for event in events if not isinstance(event, SpanEvent)]
    assert kinds == ["parse", "tool_call", "tool_result", "parse", "text", "outcome"]
    call, result = events[first(events, ToolCallEvent)], events[first(events, ToolResultEvent)]
    assert isinstance(call, ToolCallEvent) and isinstance(result, ToolResultEvent)
    assert (call.tool, call.arguments, call.agent) == ("lookup", {"word": "ox"}, "assistant/react")
    assert (result.status, result.output, result.span_id) == ("ok", "ox: a large domesticated bovine", call.span_id)
    # A span ends after what happened in it; the run's span last, just before the outcome.
    assert first(events, SpanEvent, span_id=call.span_id) > first(events, ToolResultEvent)
    spans = [event for event in events if isinstance(event, SpanEvent)]
    assert (spans[-1].kind, spans[-1].parent_id, events[-2]) == ("run", None, spans[-1])
    ids = {span.span_id for span in spans}
    assert all(span.parent_id in ids for span in spans[:-1])


def test_a_tool_call_that_needs_approval_is_an_action_and_the_run_ends_blocked(library: LibraryRepo) -> None:
    inputs, replies = RUNS["assistant/react"]
    events = streamed(library, replies, "assistant/react", inputs, require_approval=["lookup"])
    action = events[first(events, ActionEvent)]
    assert isinstance(action, ActionEvent)
    assert (action.agent, action.tool, action.arguments) == ("assistant/react", "lookup", {"word": "ox"})
    assert outcome(events).outcome == BLOCKED and texts(events) == []
    assert not any(isinstance(event, ToolResultEvent) for event in events)


def test_every_event_is_a_json_object_with_its_type(library: LibraryRepo) -> None:
    inputs, replies = RUNS["support/gated"]
    events = streamed(library, replies, "support/gated", inputs)
    dicts = [event.as_dict() for event in events]
    assert {d["type"] for d in dicts} == {"span", "parse", "gate", "text", "outcome"}
    assert dicts[-1]["outcome"] == COMPLETED and "trace" not in dicts[-1]


def test_astream_on_the_callers_loop_gives_what_stream_gives(library: LibraryRepo) -> None:
    inputs, replies = RUNS["support/gated"]

    async def read() -> list[Event]:
        model = ScriptedModel.from_replies(replies, source="the test")
        async with Executor(model=model, registry=client) as executor:
            return [event async for event in executor.astream("support/gated", inputs)]

    with registry_client(library.path) as client:
        events = asyncio.run(read())
    assert joined(events) == DRAFTED and outcome(events).completed


def test_an_agent_that_does_not_exist_raises_before_any_event(library: LibraryRepo) -> None:
    with executor_for(library.path, []) as executor, pytest.raises(AgentNotFound):
        next(executor.stream("support/nowhere", {}))
