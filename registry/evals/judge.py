"""Judges: agents of the same release that score an answer.

A judge is an ordinary leaf agent whose ``json`` output parser's
``output_schema`` declares, and requires, ``score`` (a number from 0 to 1),
``pass`` (a boolean) and ``reason`` (a string). It takes three inputs
(``JUDGE_INPUTS``): ``inputs``, the case's inputs; ``answer``, the output
judged; and ``expectation``, the judge assertion's own (empty when it gives
none). ``judge_problems`` says what keeps an agent from being one (lint
reports it, and a runner can refuse the judge before running anything).

Running the judge is the runner's, through the executor: ``before_judging``
settles what needs no judge (a run that broke or gave no output),
``judge_request`` is what to run, and ``judged`` reads the judge's run into an
``AssertionResult``. A judge that breaks or answers anything but a usable
verdict makes the assertion ``error``, never ``passed`` or ``failed``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from registry.evals.assertions import ERROR, FAILED, PASSED, AssertionResult, CaseRun, JudgeVerdict
from registry.evals.dataset import EvalCase, Judge
from registry.models import shorten

JUDGE_INPUTS = ("inputs", "answer", "expectation")
VERDICT_FIELDS = (("score", "number"), ("pass", "boolean"), ("reason", "string"))
"""What a judge's output_schema declares, each required, with its JSON type."""
_MAX_REASON = 300


@dataclass(frozen=True)
class JudgeRequest:
    """One run of a judge agent to make: which agent, with which inputs."""

    agent: str
    """``usecase/name``, an agent of the same release as the agent judged."""
    inputs: Mapping[str, Any]
    """``inputs``, ``answer`` and ``expectation`` (``JUDGE_INPUTS``)."""


def before_judging(judge: Judge, run: CaseRun) -> AssertionResult | None:
    """The result of ``judge`` when the run leaves nothing to judge: ``error``
    when it broke, ``failed`` when it gave no output; None when the judge
    is to be asked."""
    if run.error is not None:
        return AssertionResult(judge, ERROR, f"the run broke: {shorten(run.error, 200)}")
    if run.output is None:
        why = f": {shorten(run.stopped, 120)}" if run.stopped else ""
        return AssertionResult(judge, FAILED, f"the run gave no output to judge (it ended {run.outcome}{why})")
    return None


def judge_request(judge: Judge, case: EvalCase, run: CaseRun) -> JudgeRequest:
    """What to run to judge ``run`` of ``case`` (one that gave an output: ``before_judging``)."""
    return JudgeRequest(
        judge.agent,
        {"inputs": dict(case.inputs), "answer": run.output or "", "expectation": judge.expectation},
    )


def judged(judge: Judge, reply: CaseRun, *, digest: str | None = None) -> AssertionResult:
    """The result of ``judge`` from its own run, ``reply``; ``digest`` is the
    judge agent's, carried into the result."""
    if reply.error is not None:
        return AssertionResult(judge, ERROR, f"the judge broke: {shorten(reply.error, 200)}", judge_digest=digest)
    verdict = read_verdict(reply)
    if isinstance(verdict, str):
        return AssertionResult(judge, ERROR, f"the judge's verdict cannot be used: {verdict}", judge_digest=digest)
    if judge.min_score is not None:
        passed = verdict.score >= judge.min_score
        comparison = f"score {verdict.score:g} {'>=' if passed else '<'} {judge.min_score:g}"
    else:
        passed = verdict.passed
        comparison = f"{'pass' if passed else 'fail'} (score {verdict.score:g})"
    return AssertionResult(
        judge,
        PASSED if passed else FAILED,
        f"{comparison}: {verdict.reason}",
        verdict=verdict,
        judge_digest=digest,
    )


def read_verdict(reply: CaseRun) -> JudgeVerdict | str:
    """The verdict in a judge's run, or why there is none that can be used."""
    if reply.outcome != "completed":
        why = f": {shorten(reply.stopped, 120)}" if reply.stopped else ""
        return f"the judge's run ended {reply.outcome}{why}"
    value = reply.parsed
    if not isinstance(value, dict):
        return f"it is not a JSON object: {shorten(repr(reply.output), 80)}"
    score, passed, reason = value.get("score"), value.get("pass"), value.get("reason")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        return f"score is {shorten(repr(score), 40)}, not a number"
    if not 0 <= score <= 1:
        return f"score {score:g} is not between 0 and 1"
    if not isinstance(passed, bool):
        return f"pass is {shorten(repr(passed), 40)}, not true or false"
    if not isinstance(reason, str):
        return f"reason is {shorten(repr(reason), 40)}, not a text"
    one_line = " ".join(reason.split())
    return JudgeVerdict(float(score), passed, shorten(one_line, _MAX_REASON))


def judge_problems(definition: Mapping[str, Any], variables: Iterable[str]) -> list[str]:
    """Why the agent of ``definition`` (a valid one; ``variables``: those its
    templates read) cannot judge: its parser, and the inputs it takes."""
    if "pattern" in definition:
        return ["it is a composite; a judge is a leaf agent with an output_parser of type json"]
    parser = definition.get("output_parser")
    if not isinstance(parser, dict) or parser.get("type") != "json":
        return ["its output_parser is not of type json, so its verdict cannot be read"]
    problems = list(_verdict_schema_problems(parser.get("output_schema")))
    problems.extend(_input_problems(definition, frozenset(variables)))
    return problems


def _verdict_schema_problems(schema: Any) -> Iterable[str]:
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    for name, kind in VERDICT_FIELDS:
        declared = properties.get(name)
        if not isinstance(declared, dict) or declared.get("type") != kind:
            yield f"its output_schema does not declare {name!r} as a {kind}"
        elif name not in required:
            yield f"its output_schema does not require {name!r}"


def _input_problems(definition: Mapping[str, Any], variables: frozenset[str]) -> Iterable[str]:
    inputs = definition.get("inputs")
    if not isinstance(inputs, dict):
        unknown = sorted(variables - {"tools"} - set(JUDGE_INPUTS))
        if unknown:
            yield f"its templates read {', '.join(unknown)}, but a judge is given only {', '.join(JUDGE_INPUTS)}"
        return
    properties = inputs.get("properties")
    declared = set(properties) if isinstance(properties, dict) else set()
    required = inputs.get("required")
    unknown = sorted(set(required) - set(JUDGE_INPUTS)) if isinstance(required, list) else []
    if unknown:
        yield f"it requires {', '.join(unknown)}, but a judge is given only {', '.join(JUDGE_INPUTS)}"
    missing = [name for name in JUDGE_INPUTS if name not in declared]
    if inputs.get("additionalProperties") is False and missing:
        yield f"its inputs refuse {', '.join(missing)}, which a judge is given"
