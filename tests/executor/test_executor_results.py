"""What a run's result says: its counts, its warnings, its short names for the
release, and its trace as text. The model is a real OpenAI-compatible HTTP
server reached through the official SDK, or the scripted model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from registry.executor import BLOCKED, COMPLETED, EXHAUSTED, FAILED, OpenAIChatModel, PythonTools
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import (
    CLASSIFIER_LEAF,
    GATE_SCHEMA,
    GATED,
    REACT,
    executor_for,
    json_leaf,
    leaf,
    vote_composite,
)
from tests.support.openai_server import ScriptedModelServer
from tests.support.waits import LATE, RUN_LIMIT

DRAFT = leaf("drafter", "Draft: {{ question }}", question="string")
GATE = json_leaf("the gate", "Check this reply: {{ reply }}", GATE_SCHEMA, reply="string")
MAPPED = """\
name: Labelled
inputs: {type: object, required: [questions], properties: {questions: {type: array, items: {type: string}}}}
pattern:
  kind: parallel
  mode: map
  over: "{{ inputs.questions }}"
  chunk_size: 1
  max_items: 10
  branch: {agent: s/classify, inputs: {question: "{{ chunk[0] }}"}}
  aggregate: {strategy: concat}
"""
REACT_FIRST = """\
name: React, then gated
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: answer, agent: s/react, inputs: {question: "{{ inputs.question }}"}}
    - {id: gate, agent: s/gate, inputs: {reply: "{{ steps.answer.output }}"}, gate: {on_block: "Sorry."}}
"""


def test_a_call_the_run_stopped_waiting_for_counts_as_made_not_answered(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    with ScriptedModelServer([{"content": "late", "delay": LATE}], tmp_path) as server:
        model = OpenAIChatModel(base_url=server.base_url, api_key="k")
        with executor_for(repo.path, model, run_timeout=RUN_LIMIT) as executor:
            result = executor.run("s/draft", {"question": "q"})
    assert result.outcome == EXHAUSTED
    assert (result.llm_calls, result.llm_replies) == (1, 0)
    answer = result.as_dict()
    assert (answer["llm_calls"], answer["llm_replies"]) == (1, 0)
    assert result.trace.root.attributes["registry.llm_replies"] == 0


def test_the_release_has_short_names_on_the_result(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    with executor_for(repo.path, [{"content": "ok"}]) as executor:
        result = executor.run("s/draft", {"question": "q"})
    assert (result.tag, result.commit) == ("v1.0.0", repo.git("rev-parse", "v1.0.0"))
    assert (result.tag, result.commit) == (result.release.release.tag, result.release.release.commit)


def test_a_gate_that_blocks_without_a_reason_says_so_without_a_dangling_colon(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT, "s/gate.yml": GATE, "s/gated.yml": GATED})
    replies = [{"agent": "s/draft", "content": "drafted"}, {"agent": "s/gate", "content": '{"allow": false}'}]
    with executor_for(repo.path, replies) as executor:
        result = executor.run("s/gated", {"question": "q"})
    assert (result.outcome, result.output) == (BLOCKED, "Sorry.")
    assert result.error == "the gate of step 'gate' (s/gate) blocked the reply (it gave no reason)"


def test_a_long_reply_keeps_its_token_count_in_the_text_trace(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    reply = {"content": "word " * 200, "usage": {"input_tokens": 1234, "output_tokens": 567}}
    with executor_for(repo.path, [reply]) as executor:
        result = executor.run("s/draft", {"question": "q"})
    assert result.outcome == COMPLETED
    [line] = [line for line in result.trace.as_text().splitlines() if "chat test-model" in line]
    assert line.endswith("... [1234→567 tokens]"), line
    assert len(line) <= 100


# --- composites that hide nothing ------------------------------------------------------------


@pytest.fixture
def composites(repo: LibraryRepo) -> LibraryRepo:
    return repo.release(
        "v1.0.0",
        {
            "s/classify.yml": CLASSIFIER_LEAF,
            "s/labelled.yml": MAPPED,
            "s/vote.yml": vote_composite("s/classify", n=5, concurrency=5),
            "s/react.yml": REACT,
            "s/gate.yml": GATE,
            "s/react_first.yml": REACT_FIRST,
        },
    )


def test_a_map_whose_every_branch_reply_misses_its_schema_fails_saying_so(composites: LibraryRepo) -> None:
    replies = [{"content": '{"label": "refunds"}', "repeat": True}]
    with executor_for(composites.path, replies) as executor:
        result = executor.run("s/labelled", {"questions": ["a", "b", "c"]})
    assert result.outcome == FAILED and result.output is None
    assert (result.error or "").startswith(
        "s/labelled: none of the 3 replies fit its branch's output_schema; chunk 0: Your JSON does not fit"
    ), result.error


def test_a_map_with_some_invalid_branch_replies_completes_and_names_them(composites: LibraryRepo) -> None:
    replies = [
        # Its repair round (the parse error sent back) gets no JSON either.
        {"when": "Classify: b$|^Your reply is not valid JSON", "content": "billing, I think", "repeat": True},
        {"content": '{"label": "tech"}', "repeat": True},
    ]
    with executor_for(composites.path, replies) as executor:
        result = executor.run("s/labelled", {"questions": ["a", "b", "c"]})
    assert result.outcome == COMPLETED
    [warning] = result.warnings
    assert warning.startswith("s/labelled: 1 of 3 branch replies did not pass their parser (chunk 1): Your reply is")
    assert result.as_dict()["warnings"] == [warning]
    assert result.trace.root.attributes["registry.warnings"] == [warning]
    [composite] = [s for s in result.trace.spans("invoke_agent") if s.attributes.get("registry.pattern")]
    assert composite.attributes["registry.parallel.invalid"] == ["chunk 1"]


def test_a_vote_with_no_json_reply_says_none_was_json(composites: LibraryRepo) -> None:
    with executor_for(composites.path, [{"content": "billing", "repeat": True}]) as executor:
        result = executor.run("s/vote", {"question": "q"})
    assert result.outcome == FAILED
    assert (result.error or "").startswith(
        "s/vote: none of the 5 replies was JSON; vote 1: Your reply is not valid JSON"
    )


def test_an_exhausted_react_run_answers_its_last_reply_but_not_past_a_composite(composites: LibraryRepo) -> None:
    action = 'Thought: again\nAction: lookup\nAction Input: {"word": "ox"}'
    tools = [PythonTools({"lookup": lambda word: "nothing"})]
    with executor_for(composites.path, [{"content": action, "repeat": True}], tools=tools) as executor:
        alone = executor.run("s/react", {"question": "ox?"})
        gated = executor.run("s/react_first", {"question": "ox?"})
    assert (alone.outcome, alone.output) == (EXHAUSTED, action)
    # Inside a chain the step's reply would skip the gate after it: the run answers nothing.
    assert (gated.outcome, gated.output) == (EXHAUSTED, None)
    assert "max_iterations 4" in (gated.error or "")


# --- model names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "warning"),
    [
        (
            {"model_map": {"gpt-4o": "served", "test-model": "served"}, "warn_unused_model_map": True},
            "model map gpt-4o=served (--model-map) matched no model the agents of s/draft name (test-model)",
        ),
        (
            {"model_map": {"test-model": "served"}, "model_name": "other", "warn_unused_model_map": True},
            "model map test-model=served (--model-map) is not used: the model name 'other' (--model-name)"
            " is sent for every call",
        ),
    ],
)
def test_a_model_map_that_matches_nothing_is_said_once(
    repo: LibraryRepo, caplog: pytest.LogCaptureFixture, options: dict[str, Any], warning: str
) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    with caplog.at_level(logging.WARNING, "registry.executor"):
        with executor_for(repo.path, [{"content": "ok", "repeat": True}], **options) as executor:
            first = executor.run("s/draft", {"question": "q"})
            second = executor.run("s/draft", {"question": "q"})
    assert first.outcome == COMPLETED and first.warnings == second.warnings == (warning,)
    assert [r.getMessage() for r in caplog.records if r.name == "registry.executor"] == [warning]


def test_an_executor_serving_many_agents_does_not_call_a_map_for_another_agents_model_unused(
    repo: LibraryRepo, caplog: pytest.LogCaptureFixture
) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    options: dict[str, Any] = {"model_map": {"gpt-4o": "served", "test-model": "served"}}
    with caplog.at_level(logging.WARNING, "registry.executor"):
        with executor_for(repo.path, [{"content": "ok"}], **options) as executor:
            result = executor.run("s/draft", {"question": "q"})
    assert result.outcome == COMPLETED and result.warnings == ()
    assert not [r for r in caplog.records if r.name == "registry.executor"]


def test_a_model_map_that_matches_says_nothing(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})
    with executor_for(repo.path, [{"content": "ok"}], model_map={"test-model": "served"}) as executor:
        result = executor.run("s/draft", {"question": "q"})
    assert result.warnings == ()
