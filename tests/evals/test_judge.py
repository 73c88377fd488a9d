"""Judges: the request a runner sends, the verdict read from the judge's
run (garbage makes the assertion an error, never a pass or a failure), and
what makes an agent a judge."""

from __future__ import annotations

import io
import math
from typing import Any

import pytest
import yaml

from registry.evals import (
    CaseRun,
    EvalCase,
    Judge,
    JudgeRequest,
    JudgeVerdict,
    before_judging,
    judge_problems,
    judge_request,
    judged,
)
from registry.evals.reading import EvalFile
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for

JUDGE = """\
name: Helpfulness judge
model: {name: test-model}
prompt_templates:
  system: Judge the answer. Reply with JSON {"score", "pass", "reason"}.
  user: "Inputs: {{ inputs | tojson }}\\nAnswer: {{ answer }}\\nExpected: {{ expectation }}"
inputs:
  type: object
  required: [inputs, answer]
  properties: {inputs: {type: object}, answer: {type: string}, expectation: {type: string}}
output_parser:
  type: json
  output_schema:
    type: object
    required: [score, pass, reason]
    properties: {score: {type: number}, pass: {type: boolean}, reason: {type: string}}
"""
STRICT = JUDGE.replace("{score: {type: number}", "{score: {type: number, minimum: 0, maximum: 1}")
JUDGE_DEFINITION: dict[str, Any] = yaml.safe_load(JUDGE)
RUBRIC = Judge("evals/helpfulness", None, "Offers a refund.")
AT_LEAST = Judge("evals/helpfulness", 0.7)


def _case() -> EvalCase:
    text = "cases:\n  - {id: one, inputs: {ticket: charged twice}, expect: [{judge: evals/helpfulness}]}\n"
    [case] = list(EvalFile(io.BytesIO(text.encode()), source="x.yml", agent="support/triage").cases())
    return case


def _reply(data: Any, *, output: str | None = None) -> CaseRun:
    return CaseRun(output=output if output is not None else repr(data), data=data)


def test_the_judge_is_given_the_case_inputs_the_answer_and_the_expectation() -> None:
    request = judge_request(RUBRIC, _case(), CaseRun(output="We will refund you."))
    assert request == JudgeRequest(
        "evals/helpfulness",
        {"inputs": {"ticket": "charged twice"}, "answer": "We will refund you.", "expectation": "Offers a refund."},
    )


def test_what_leaves_nothing_to_judge_is_settled_without_the_judge() -> None:
    broke = before_judging(RUBRIC, CaseRun(output=None, outcome="failed", error="model outage"))
    assert broke is not None and (broke.status, broke.reason) == ("error", "the run broke: model outage")
    silent = before_judging(RUBRIC, CaseRun(output=None, outcome="blocked", stopped="the gate said no"))
    assert silent is not None and silent.status == "failed"
    assert silent.reason == "the run gave no output to judge (it ended blocked: the gate said no)"
    assert before_judging(RUBRIC, CaseRun(output="An answer.")) is None


@pytest.mark.parametrize(
    ("judge", "verdict", "status", "reason"),
    [
        (RUBRIC, {"score": 0.4, "pass": True, "reason": "Polite."}, "passed", "pass (score 0.4): Polite."),
        (RUBRIC, {"score": 0.9, "pass": False, "reason": "No refund."}, "failed", "fail (score 0.9): No refund."),
        (AT_LEAST, {"score": 0.7, "pass": False, "reason": "Fine."}, "passed", "score 0.7 >= 0.7: Fine."),
        (AT_LEAST, {"score": 0.5, "pass": True, "reason": "Vague."}, "failed", "score 0.5 < 0.7: Vague."),
        (AT_LEAST, {"score": 1, "pass": True, "reason": "Two\nlines."}, "passed", "score 1 >= 0.7: Two lines."),
    ],
)
def test_a_verdict_passes_or_fails_by_min_score_or_else_by_the_judges_pass(
    judge: Judge, verdict: dict[str, Any], status: str, reason: str
) -> None:
    result = judged(judge, _reply(verdict), digest="sha256:judge")
    assert (result.status, result.reason, result.judge_digest) == (status, reason, "sha256:judge")
    assert result.verdict == JudgeVerdict(float(verdict["score"]), verdict["pass"], " ".join(verdict["reason"].split()))


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (CaseRun(output="Looks helpful to me!"), "it is not a JSON object: 'Looks helpful to me!'"),
        (CaseRun(output="[0.9, true]"), "it is not a JSON object: '[0.9, true]'"),
        (_reply({"pass": True, "reason": "ok"}), "score is None, not a number"),
        (_reply({"score": "0.9", "pass": True, "reason": "ok"}), "score is '0.9', not a number"),
        (_reply({"score": True, "pass": True, "reason": "ok"}), "score is True, not a number"),
        (_reply({"score": 7, "pass": True, "reason": "ok"}), "score 7 is not between 0 and 1"),
        (_reply({"score": -0.1, "pass": True, "reason": "ok"}), "score -0.1 is not between 0 and 1"),
        (_reply({"score": math.nan, "pass": True, "reason": "ok"}), "score is nan, not a number"),
        (CaseRun(output='{"score": NaN, "pass": true, "reason": "ok"}'), "score is nan, not a number"),
        (_reply({"score": 0.9, "pass": "yes", "reason": "ok"}), "pass is 'yes', not true or false"),
        (_reply({"score": 0.9, "pass": True}), "reason is None, not a text"),
        (
            CaseRun(output=None, outcome="failed", stopped="the reply is not JSON"),
            "the judge's run ended failed: the reply is not JSON",
        ),
    ],
)
def test_a_garbage_verdict_makes_the_assertion_an_error_never_a_pass_or_a_failure(reply: CaseRun, why: str) -> None:
    for judge in (RUBRIC, AT_LEAST):
        result = judged(judge, reply)
        assert (result.status, result.reason) == ("error", f"the judge's verdict cannot be used: {why}")
        assert result.verdict is None


def test_a_judge_that_broke_makes_the_assertion_an_error() -> None:
    result = judged(AT_LEAST, CaseRun(output=None, outcome="failed", error="the model answered 503"), digest="d")
    assert (result.status, result.reason, result.judge_digest) == (
        "error",
        "the judge broke: the model answered 503",
        "d",
    )


def test_a_real_judge_run_is_read_into_a_verdict_and_garbage_into_an_error(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"evals/helpfulness.yml": JUDGE, "evals/strict.yml": STRICT})
    request = judge_request(AT_LEAST, _case(), CaseRun(output="We will refund you."))
    replies = [
        {
            "agent": "evals/helpfulness",
            "when": "Answer: We will refund you",
            "content": '{"score": 0.8, "pass": true, "reason": "Refunds."}',
        },
        {"agent": "evals/helpfulness", "content": '{"score": 7, "pass": true, "reason": "Great!"}'},
        {"agent": "evals/strict", "content": "Great answer, 10/10!", "repeat": True},
    ]
    with executor_for(repo.path, replies) as executor:
        good = executor.run(request.agent, request.inputs)
        out_of_range = executor.run(request.agent, request.inputs)
        prose = executor.run("evals/strict", request.inputs)
    result = judged(AT_LEAST, CaseRun.of(good), digest=good.digest)
    assert (result.status, result.reason, result.judge_digest) == ("passed", "score 0.8 >= 0.7: Refunds.", good.digest)
    assert judged(AT_LEAST, CaseRun.of(out_of_range)).reason == (
        "the judge's verdict cannot be used: score 7 is not between 0 and 1"
    )
    unparsed = judged(AT_LEAST, CaseRun.of(prose))
    assert unparsed.status == "error"
    assert unparsed.reason.startswith(
        "the judge's verdict cannot be used: the judge's run ended failed: the reply of evals/strict does not parse"
    )


def _with(definition: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = yaml.safe_load(yaml.safe_dump(definition))
    target = changed
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return changed  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("definition", "variables", "problems"),
    [
        (JUDGE_DEFINITION, {"inputs", "answer", "expectation"}, []),
        (
            _with(JUDGE_DEFINITION, ("output_parser",), {"type": "text"}),
            set(),
            ["its output_parser is not of type json, so its verdict cannot be read"],
        ),
        (
            _with(JUDGE_DEFINITION, ("output_parser", "output_schema", "properties", "score"), {"type": "string"}),
            set(),
            ["its output_schema does not declare 'score' as a number"],
        ),
        (
            _with(JUDGE_DEFINITION, ("output_parser", "output_schema", "required"), ["score"]),
            set(),
            ["its output_schema does not require 'pass'", "its output_schema does not require 'reason'"],
        ),
        (
            _with(JUDGE_DEFINITION, ("inputs", "required"), ["inputs", "question"]),
            set(),
            ["it requires question, but a judge is given only inputs, answer, expectation"],
        ),
        (
            _with(JUDGE_DEFINITION, ("inputs", "additionalProperties"), False),
            set(),
            [],
        ),
        (
            _with(
                _with(JUDGE_DEFINITION, ("inputs", "additionalProperties"), False),
                ("inputs", "properties", "expectation"),
                None,
            ),
            set(),
            ["its inputs refuse expectation, which a judge is given"],
        ),
        (
            _with(JUDGE_DEFINITION, ("inputs",), None),
            {"answer", "question", "tools"},
            ["its templates read question, but a judge is given only inputs, answer, expectation"],
        ),
        (
            {"name": "x", "pattern": {"kind": "chain", "steps": []}},
            set(),
            ["it is a composite; a judge is a leaf agent with an output_parser of type json"],
        ),
    ],
)
def test_what_keeps_an_agent_from_judging(definition: dict[str, Any], variables: set[str], problems: list[str]) -> None:
    assert judge_problems(definition, variables) == problems
