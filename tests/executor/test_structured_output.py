"""Structured output (registry/executor/structured.py): what a ``json`` agent
asks the provider for, tool_choice per round, and repair rounds in leaves,
gates, classifiers, evaluators and votes; against the scripted model (the
wire format of each provider is its adapter's tests')."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from registry.executor import COMPLETED, FAILED, PythonTools, ScriptedModel, SqliteFtsRetriever
from registry.executor.patterns import run_agent
from registry.executor.runtime import Budget, ModelNames, RunContext, Totals, ValueCache
from registry.executor.scripted import ScriptedReply
from registry.executor.tools import ToolBox
from registry.executor.trace import Span, Trace
from registry.providers.chat import ChatReply, ChatRequest, ResponseFormat
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import (
    GATE_SCHEMA,
    LABEL_SCHEMA,
    VERDICT_SCHEMA,
    executor_for,
    json_leaf,
    leaf,
    registry_client,
    vote_composite,
)

ANSWER_SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}


def answer_leaf(parser: str = f"{{type: json, output_schema: {json.dumps(ANSWER_SCHEMA)}}}") -> str:
    return leaf("the answerer", "Q: {{ question }}", question="string") + f"output_parser: {parser}\n"


TOOL_AGENT = """\
name: Tool caller with a JSON answer
type: tool_calling
max_iterations: 3
model: {{name: test-model}}
tools:
  - {{name: lookup, description: Looks a word up., parameters: {{type: object, properties: {{word: {{type: string}}}}}}}}
  - {{name: define, description: Defines a word., parameters: {{type: object, properties: {{word: {{type: string}}}}}}}}
{choice}output_parser: {{type: json}}
prompt_templates:
  user: "{{{{ question }}}}"
inputs: {{type: object, required: [question], properties: {{question: {{type: string}}}}}}
"""

RAG_AGENT = """\
name: Docs answer as JSON
type: rag
rag: {retriever: product-docs}
model: {name: test-model}
output_parser: {type: json}
prompt_templates:
  user: "{{ query }} {{ passages | length }}"
inputs: {type: object, required: [query], properties: {query: {type: string}, passages: {type: array}}}
"""


class RecordingModel(ScriptedModel):
    """The scripted model, keeping every request it answers."""

    def __init__(self, replies: Sequence[ScriptedReply], *, source: str) -> None:
        super().__init__(replies, source=source)
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        self.requests.append(request)
        return await super().complete(request)


def recording(replies: list[Any]) -> RecordingModel:
    model = RecordingModel.from_replies(replies, source="the test")
    assert isinstance(model, RecordingModel)
    return model


# --- what is asked for ---------------------------------------------------------------------------


def test_a_json_leaf_asks_for_json_fitting_its_schema_and_the_chat_span_says_so(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/answer.yml": answer_leaf(), "s/plain.yml": leaf("plain", "{{ q }}", q="string")})
    model = recording([{"content": '{"answer": "42"}'}, {"content": "text"}])
    with executor_for(repo.path, model) as executor:
        result = executor.run("s/answer", {"question": "q"})
        plain = executor.run("s/plain", {"q": "q"})
    assert (result.outcome, result.data) == (COMPLETED, {"answer": "42"})
    asked, not_asked = model.requests
    assert asked.response_format == ResponseFormat(schema=ANSWER_SCHEMA, name="answer")
    [chat] = result.trace.spans("chat")
    assert chat.attributes["registry.response_format"] == {"name": "answer", "schema": ANSWER_SCHEMA}
    assert not_asked.response_format is None
    assert "registry.response_format" not in plain.trace.spans("chat")[0].attributes


def test_a_json_leaf_without_a_schema_asks_for_any_json(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/any_json.yml": answer_leaf("{type: json}")})
    model = recording([{"content": "[1, 2]"}])
    with executor_for(repo.path, model) as executor:
        result = executor.run("s/any_json", {"question": "q"})
    assert (result.outcome, result.data) == (COMPLETED, [1, 2])
    assert model.requests[0].response_format == ResponseFormat(schema=None, name="any_json")


def test_tool_rounds_ask_for_no_json_and_a_forced_tool_choice_holds_until_a_tool_is_called(
    repo: LibraryRepo,
) -> None:
    repo.release(
        "v1.0.0",
        {
            "s/required.yml": TOOL_AGENT.format(choice="tool_choice: required\n"),
            "s/named.yml": TOOL_AGENT.format(choice="tool_choice: define\n"),
            "s/default.yml": TOOL_AGENT.format(choice=""),
        },
    )
    replies = [
        {"agent": "s/required", "tool_calls": [{"name": "lookup", "arguments": {"word": "ox"}}]},
        {"agent": "s/required", "content": '{"meaning": "an animal"}'},
        {"agent": "s/named", "tool_calls": [{"name": "define", "arguments": {"word": "ox"}}]},
        {"agent": "s/named", "content": '{"meaning": "an animal"}'},
        {"agent": "s/default", "content": "An animal."},
        {"agent": "s/default", "content": '{"meaning": "an animal"}'},
    ]
    tools = [PythonTools({"lookup": lambda word: "a bovine", "define": lambda word: "a bovine"})]
    model = recording(replies)
    with executor_for(repo.path, model, tools=tools) as executor:
        required = executor.run("s/required", {"question": "ox?"})
        named = executor.run("s/named", {"question": "ox?"})
        default = executor.run("s/default", {"question": "ox?"})
    assert [r.outcome for r in (required, named, default)] == [COMPLETED] * 3
    assert [(r.agent, r.tool_choice, r.response_format) for r in model.requests] == [
        ("s/required", "required", None),
        ("s/required", "auto", None),  # it called a tool: now it may answer
        ("s/named", "define", None),
        ("s/named", "auto", None),
        ("s/default", "auto", None),
        # A repair round keeps the tools in the request (the history may hold
        # their calls) but the model may not call them.
        ("s/default", "none", None),
    ]
    assert len(model.requests[-1].tools) == 2
    assert model.requests[-1].messages[-1]["content"].startswith("Your reply is not valid JSON")


def test_the_rag_retrieve_round_lets_the_model_decide_and_the_answer_round_asks_for_json(
    repo: LibraryRepo, docs_index: SqliteFtsRetriever
) -> None:
    repo.release("v1.0.0", {"s/rag.yml": RAG_AGENT})
    replies = [
        {"tool_calls": [{"name": "retrieve", "arguments": {"query": "token expiry"}}]},
        {"content": '{"expires_after_days": 365}'},
    ]
    model = recording(replies)
    with executor_for(repo.path, model, retrievers={"product-docs": docs_index}) as executor:
        result = executor.run("s/rag", {"query": "When do tokens expire?"})
    assert (result.outcome, result.data) == (COMPLETED, {"expires_after_days": 365})
    retrieve, answer = model.requests
    assert (retrieve.tool_choice, retrieve.response_format) == ("auto", None)
    assert (answer.tool_choice, answer.response_format) == (None, ResponseFormat(schema=None, name="rag"))


# --- repair rounds -------------------------------------------------------------------------------


def test_a_reply_that_is_not_json_is_repaired_in_a_second_round(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/answer.yml": answer_leaf()})
    model = recording([{"content": "The answer is 42."}, {"content": '```json\n{"answer": "42"}\n```'}])
    with executor_for(repo.path, model) as executor:
        result = executor.run("s/answer", {"question": "q"})
    assert (result.outcome, result.data, result.llm_calls) == (COMPLETED, {"answer": "42"}, 2)
    first, repair = model.requests
    assert list(repair.messages[: len(first.messages)]) == list(first.messages)
    sent_back, error = repair.messages[len(first.messages) :]
    assert sent_back == {"role": "assistant", "content": "The answer is 42."}
    assert error["role"] == "user"
    assert error["content"] == (
        "Your reply is not valid JSON (Expecting value). Reply with JSON only.\n"
        "Write your whole reply again as JSON that fixes this, with nothing before or after it"
        " (no explanation, no apology)."
    )
    assert repair.response_format == first.response_format is not None
    [span] = result.trace.spans("repair")
    assert span.name == "repair 1/1"
    assert span.attributes["registry.repair.attempt"] == 1
    assert span.attributes["registry.repair.attempts"] == 1
    assert span.attributes["registry.repair.reason"] == "invalid_json"
    assert span.attributes["registry.repair.error"].startswith("Your reply is not valid JSON")
    assert span.attributes["registry.decision"] == "parsed"
    # The round's model call and its parse are inside the repair span.
    assert [child.operation for child in span.children] == ["chat", "parse"]
    assert span.children[0].attributes["registry.input_messages"] == [sent_back, error]
    [line] = [line for line in result.trace.as_text().splitlines() if "repair 1/1" in line]
    assert line.endswith("): parsed"), line


def test_a_reply_that_misses_the_schema_is_sent_back_with_what_is_wrong(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/answer.yml": answer_leaf()})
    model = recording([{"content": '{"answr": "42"}'}, {"content": '{"answer": "42"}'}])
    with executor_for(repo.path, model) as executor:
        result = executor.run("s/answer", {"question": "q"})
    assert (result.outcome, result.llm_calls) == (COMPLETED, 2)
    error = model.requests[1].messages[-1]["content"]
    assert error.startswith("Your JSON does not fit the required schema: /answer: missing required input 'answer'.")
    assert result.trace.spans("repair")[0].attributes["registry.repair.reason"] == "schema_mismatch"


def test_repair_rounds_stop_at_repair_attempts_and_the_parse_error_stands(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/answer.yml": answer_leaf("{type: json, repair_attempts: 2}")})
    with executor_for(repo.path, [{"content": "still prose", "repeat": True}]) as executor:
        result = executor.run("s/answer", {"question": "q"})
    assert (result.outcome, result.llm_calls) == (FAILED, 3)
    assert result.error == (
        "the reply of s/answer does not parse: Your reply is not valid JSON (Expecting value). Reply with JSON only."
    )
    spans = result.trace.spans("repair")
    assert [s.name for s in spans] == ["repair 1/2", "repair 2/2"]
    assert [s.attributes["registry.decision"] for s in spans] == ["still invalid_json"] * 2


def test_repair_attempts_zero_makes_no_repair_round(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/answer.yml": answer_leaf("{type: json, repair_attempts: 0}")})
    with executor_for(repo.path, [{"content": "prose", "repeat": True}]) as executor:
        result = executor.run("s/answer", {"question": "q"})
    assert (result.outcome, result.llm_calls) == (FAILED, 1)
    assert result.trace.spans("repair") == []


def test_a_text_or_react_reply_is_never_repaired(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/plain.yml": leaf("plain", "{{ q }}", q="string")})
    with executor_for(repo.path, [{"content": "{not json", "repeat": True}]) as executor:
        result = executor.run("s/plain", {"q": "q"})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "{not json", 1)


def test_no_repair_round_is_made_past_the_call_budget(repo: LibraryRepo) -> None:
    # A composite's worst case leaves repair rounds out: a run whose budget is
    # spent keeps the parse error rather than ending exhausted.
    repo.release("v1.0.0", {"s/answer.yml": answer_leaf()})
    with registry_client(repo.path) as client:
        agent = client.get("s", "answer", release="v1.0.0")
    model = ScriptedModel.from_replies([{"content": "prose", "repeat": True}], source="the test")
    ctx = RunContext(
        model=model,
        tools=ToolBox(),
        retrievers={},
        names=ModelNames(),
        agents={"s/answer": agent},
        release=agent.release,
        budget=Budget(1, "the run"),
        totals=Totals(),
        values=ValueCache(),
    )
    root = Span("run", "run")
    output = asyncio.run(run_agent(agent, {"question": "q"}, ctx, root))
    assert output.text == "prose" and output.parse_reason == "invalid_json"
    assert ctx.totals.llm_calls == 1
    assert Trace(root).spans("repair") == []
    [leaf] = Trace(root).spans("invoke_agent")
    assert leaf.attributes["registry.repair.skipped"] == "the model-call budget is spent"


# --- in patterns: a gate, a classifier, an evaluator, a vote -------------------------------------

GATED = """\
name: Gated
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: draft, agent: p/draft, inputs: {question: "{{ inputs.question }}"}}
    - {id: gate, agent: p/gate, inputs: {reply: "{{ steps.draft.output }}"}, gate: {on_block: "Sorry."}}
  limits: {max_llm_calls: 3}
"""
ROUTED = """\
name: Routed
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: route
  classifier: {agent: p/classify, inputs: {question: "{{ inputs.question }}"}}
  routes: {billing: {agent: p/draft, inputs: {question: "{{ inputs.question }}"}}}
  default: {agent: p/draft, inputs: {question: "other {{ inputs.question }}"}}
"""
REVIEWED = """\
name: Reviewed
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: evaluator_optimizer
  max_iterations: 1
  on_exhausted: fail
  generator: {agent: p/draft, inputs: {question: "{{ inputs.question }}"}}
  evaluator: {agent: p/review, inputs: {code: "{{ candidate }}"}}
"""


@pytest.fixture
def patterns(repo: LibraryRepo) -> LibraryRepo:
    return repo.release(
        "v1.0.0",
        {
            "p/draft.yml": leaf("the drafter", "Draft: {{ question }}", question="string"),
            "p/gate.yml": json_leaf("the gate", "Check: {{ reply }}", GATE_SCHEMA, reply="string"),
            "p/classify.yml": json_leaf("the classifier", "Classify: {{ question }}", LABEL_SCHEMA, question="string"),
            "p/review.yml": json_leaf("the reviewer", "Review: {{ code }}", VERDICT_SCHEMA, code="string"),
            "p/gated.yml": GATED,
            "p/routed.yml": ROUTED,
            "p/reviewed.yml": REVIEWED,
            "p/vote.yml": vote_composite("p/classify", n=3, concurrency=1),
        },
    )


REPAIRED = "(?i)^Your (reply|JSON)"
"""What the last message of a repair round starts with: the parse error."""


def test_a_gate_whose_first_reply_does_not_parse_is_repaired_and_decides(patterns: LibraryRepo) -> None:
    replies = [
        {"agent": "p/draft", "content": "Pay by card."},
        {"agent": "p/gate", "when": REPAIRED, "content": '{"allow": true}'},
        {"agent": "p/gate", "content": "allow: yes"},
    ]
    with executor_for(patterns.path, replies) as executor:
        result = executor.run("p/gated", {"question": "q"})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "Pay by card.", 3)
    assert [g.attributes["registry.decision"] for g in result.trace.spans("gate")] == ["allow"]


def test_a_classifier_whose_label_is_off_its_enum_is_repaired_and_routes(patterns: LibraryRepo) -> None:
    replies = [
        {"agent": "p/classify", "when": REPAIRED, "content": '{"label": "billing"}'},
        {"agent": "p/classify", "content": '{"label": "refunds"}'},
        {"agent": "p/draft", "when": "^Draft: q$", "content": "billing answer"},
    ]
    with executor_for(patterns.path, replies) as executor:
        result = executor.run("p/routed", {"question": "q"})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "billing answer", 3)
    [repair] = result.trace.spans("repair")
    assert repair.attributes["registry.repair.reason"] == "schema_mismatch"


def test_an_evaluator_whose_verdict_does_not_parse_is_repaired(patterns: LibraryRepo) -> None:
    replies = [
        {"agent": "p/draft", "content": "def f(): pass"},
        {"agent": "p/review", "when": REPAIRED, "content": '{"pass": true, "feedback": ""}'},
        {"agent": "p/review", "content": "Looks good to me!"},
    ]
    with executor_for(patterns.path, replies) as executor:
        result = executor.run("p/reviewed", {"question": "q"})
    assert (result.outcome, result.output, result.llm_calls) == (COMPLETED, "def f(): pass", 3)


def test_a_gate_that_never_gives_json_fails_after_its_repair_round(patterns: LibraryRepo) -> None:
    replies = [{"agent": "p/draft", "content": "Pay by card."}, {"agent": "p/gate", "content": "ok", "repeat": True}]
    with executor_for(patterns.path, replies) as executor:
        result = executor.run("p/gated", {"question": "q"})
    assert (result.outcome, result.llm_calls) == (FAILED, 3)
    assert (result.error or "").startswith("the gate of step 'gate': the reply of p/gate does not parse: Your reply")


def test_a_vote_counts_a_repaired_branch(patterns: LibraryRepo) -> None:
    replies = [
        {"agent": "p/classify", "when": REPAIRED, "content": '{"label": "tech"}', "repeat": True},
        {"agent": "p/classify", "content": "tech, surely", "times": 1},
        {"agent": "p/classify", "content": '{"label": "tech"}', "repeat": True},
    ]
    with executor_for(patterns.path, replies) as executor:
        result = executor.run("p/vote", {"question": "q"})
    assert (result.outcome, result.data, result.llm_calls) == (COMPLETED, {"label": "tech"}, 4)
    assert result.warnings == ()
