"""Checking a case's assertions against what one run of it did.

A runner turns each run into a ``CaseRun`` (``CaseRun.of`` reads the
executor's ``RunResult``) and ``check`` gives each assertion's
``AssertionResult``: ``passed``, ``failed`` with a one-line reason, or
``error`` when the run itself broke (a model outage: ``CaseRun.error``), so
that an outage is never counted as a pass or a failure. ``judge``
assertions need a model, so they are not checked here: ``registry.evals.judge``
builds the judge's request and reads its verdict into the same result type.

Text assertions (``contains``, ``not_contains``, ``regex``) read the output;
``json_schema`` and ``equals`` read the parsed output: the agent's parsed
data (a ``json`` parser's), else the output read as JSON. A run that gave
no output fails them, whatever they say.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from registry.evals.dataset import (
    Assertion,
    Contains,
    Equals,
    JsonSchema,
    LocalAssertion,
    MaxLlmCalls,
    NotContains,
    OutcomeIs,
    Regex,
    ToolCalled,
)
from registry.models import shorten

if TYPE_CHECKING:
    from registry.executor import RunResult

Status = Literal["passed", "failed", "error"]
PASSED: Status = "passed"
FAILED: Status = "failed"
ERROR: Status = "error"


@dataclass(frozen=True)
class ToolCallMade:
    """A tool call a run made, as the model asked for it."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class CaseRun:
    """What one run of a case did, as its assertions see it."""

    output: str | None
    """The answer's text; None when the run gave none."""
    data: Any = None
    """The parsed answer, when the agent's parser gives one (``json``)."""
    outcome: str = "completed"
    """``completed``, ``blocked``, ``exhausted`` or ``failed``."""
    stopped: str | None = None
    """Why the run did not complete, in one line (the executor's ``RunResult.error``)."""
    llm_calls: int = 0
    tool_calls: tuple[ToolCallMade, ...] = ()
    """In the order they were made, those of every agent a composite ran included."""
    error: str | None = None
    """Why the run could not be made or finished for a reason that is not the
    agent's (a model outage, a request missing from a replay file): then every
    assertion is ``error``."""

    @classmethod
    def of(cls, result: RunResult, *, error: str | None = None) -> CaseRun:
        """What ``result`` did; ``error`` when the runner found that the run
        broke (its outcome alone does not say whether a failure was the
        agent's or the model's)."""
        calls = tuple(
            ToolCallMade(
                str(span.attributes.get("gen_ai.tool.name", "")),
                _arguments(span.attributes.get("registry.tool.arguments")),
            )
            for span in result.trace.root.walk()
            if span.operation == "execute_tool"
        )
        return cls(
            output=result.output,
            data=result.data,
            outcome=result.outcome,
            stopped=result.error,
            llm_calls=result.llm_calls,
            tool_calls=calls,
            error=error,
        )

    @property
    def parsed(self) -> Any:
        """The parsed output: ``data``, else the output read as JSON; None when neither."""
        if self.data is not None or self.output is None:
            return self.data
        try:
            return json.loads(self.output)
        except ValueError:
            return None


def _arguments(value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):  # arguments a model sent as text that is not an object
        try:
            decoded = json.loads(value)
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


@dataclass(frozen=True)
class JudgeVerdict:
    """What a judge answered, once found usable (``registry.evals.judge.read_verdict``)."""

    score: float
    """From 0 to 1."""
    passed: bool
    """The judge's own ``pass``."""
    reason: str


@dataclass(frozen=True)
class AssertionResult:
    """The verdict on one assertion for one run."""

    assertion: Assertion
    status: Status
    reason: str = ""
    """One line: why it failed or could not be checked; for a judge, its reason."""
    verdict: JudgeVerdict | None = None
    """A judge's verdict (None for other assertions, or when it gave none that could be read)."""
    judge_digest: str | None = None
    """The judge agent's digest, so that a changed judge shows as such."""

    @property
    def passed(self) -> bool:
        return self.status == PASSED


def check(assertion: LocalAssertion, run: CaseRun) -> AssertionResult:
    """The verdict on ``assertion`` for ``run`` (never raises on what the run did)."""
    if run.error is not None:
        return AssertionResult(assertion, ERROR, f"the run broke: {shorten(run.error, 200)}")
    reason = _failure(assertion, run)
    return AssertionResult(assertion, PASSED if reason is None else FAILED, reason or "")


def _failure(assertion: LocalAssertion, run: CaseRun) -> str | None:
    """Why ``assertion`` fails for ``run``, or None when it passes."""
    if isinstance(assertion, OutcomeIs):
        if run.outcome == assertion.outcome:
            return None
        why = f" ({shorten(run.stopped, 120)})" if run.stopped else ""
        return f"the run ended {run.outcome}{why}, not {assertion.outcome}"
    if isinstance(assertion, MaxLlmCalls):
        if run.llm_calls <= assertion.calls:
            return None
        return f"the run made {run.llm_calls} model calls, more than {assertion.calls}"
    if isinstance(assertion, ToolCalled):
        return _tool_failure(assertion, run.tool_calls)
    if run.output is None:
        why = f": {shorten(run.stopped, 120)}" if run.stopped else ""
        return f"the run gave no output (it ended {run.outcome}{why})"
    if isinstance(assertion, (Contains, NotContains, Regex)):
        return _text_failure(assertion, run.output)
    return _parsed_failure(assertion, run)


def _text_failure(assertion: Contains | NotContains | Regex, output: str) -> str | None:
    if isinstance(assertion, Contains):
        return None if assertion.text in output else f"the output does not contain {shorten(assertion.text, 60)!r}"
    if isinstance(assertion, NotContains):
        if assertion.text not in output:
            return None
        return f"the output contains {shorten(assertion.text, 60)!r}: {_around(output, assertion.text)}"
    if assertion.compiled.search(output) is not None:
        return None
    return f"the output does not match /{shorten(assertion.pattern, 60)}/: {shorten(repr(output), 80)}"


def _around(output: str, text: str) -> str:
    """The output around the first ``text`` in it, quoted."""
    start = output.find(text)
    return repr(output[max(0, start - 30) : start + len(text) + 30])


def _parsed_failure(assertion: JsonSchema | Equals, run: CaseRun) -> str | None:
    value = run.parsed
    if value is None:
        return f"the output is not JSON: {shorten(repr(run.output), 80)}"
    if isinstance(assertion, JsonSchema):
        issues = assertion.validator.issues(value)
        if not issues:
            return None
        listed = "; ".join(f"{issue.path or '/'}: {_output_words(issue.message)}" for issue in issues[:3])
        more = f" (and {len(issues) - 3} more)" if len(issues) > 3 else ""
        return shorten(f"the output does not fit the schema: {listed}{more}", 300)
    found, missing = _at_path(value, assertion.keys)
    if missing is not None:
        return f"the output has no {missing!r}" + (f" at {assertion.path!r}" if missing != assertion.path else "")
    if same_json(found, assertion.value):
        return None
    label = assertion.path or "the output"
    return f"{label} is {shorten(json.dumps(found, ensure_ascii=False), 80)}, not {_shown(assertion.value)}"


def _output_words(message: str) -> str:
    """The inputs schema's wording, said of an output."""
    return message.replace("missing required input", "missing required property").replace(
        "unexpected input", "unexpected property"
    )


def _shown(value: Any) -> str:
    return shorten(json.dumps(value, ensure_ascii=False), 80)


def _at_path(value: Any, keys: tuple[str, ...]) -> tuple[Any, str | None]:
    """The value at ``keys`` in ``value``, or the first key that is not there."""
    for key in keys:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None, key
    return value, None


def same_json(found: Any, expected: Any) -> bool:
    """Whether two JSON values are equal as JSON: ``true`` is not ``1``, and ``1`` is ``1.0``."""
    if isinstance(found, bool) or isinstance(expected, bool):
        return isinstance(found, bool) and isinstance(expected, bool) and found == expected
    if isinstance(found, (int, float)) and isinstance(expected, (int, float)):
        return found == expected
    if isinstance(found, dict) and isinstance(expected, dict):
        return found.keys() == expected.keys() and all(same_json(found[k], expected[k]) for k in found)
    if isinstance(found, list) and isinstance(expected, list):
        return len(found) == len(expected) and all(same_json(a, b) for a, b in zip(found, expected, strict=True))
    return type(found) is type(expected) and bool(found == expected)


def holds(found: Any, expected: Any) -> bool:
    """Whether ``found`` holds ``expected``: objects by the keys ``expected``
    gives (each holding its value), anything else equal as JSON."""
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(key in found and holds(found[key], v) for key, v in expected.items())
    return same_json(found, expected)


def _tool_failure(assertion: ToolCalled, calls: tuple[ToolCallMade, ...]) -> str | None:
    named = [call for call in calls if call.name == assertion.name]
    if not named:
        made = ", ".join(sorted({call.name for call in calls})) or "none"
        return f"{assertion.name} was not called (tools called: {shorten(made, 120)})"
    if assertion.args is None or any(holds(dict(call.arguments), dict(assertion.args)) for call in named):
        return None
    return (
        f"{assertion.name} was called {len(named)} time{'s' if len(named) > 1 else ''}, never with"
        f" {_shown(dict(assertion.args))} (first with {_shown(dict(named[0].arguments))})"
    )
