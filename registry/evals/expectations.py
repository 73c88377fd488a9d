"""Reading ``expect:``: each item of the list into its assertion's type.

An item is a mapping of one key, the assertion's kind, to what it checks
(``- contains: refund``). An unknown kind comes with a "did you mean"; a
regular expression is compiled by RE2 when it is read, and one RE2 refuses
(backreferences, lookaround) is a problem (rule ``eval-regex``), so that no
pattern that could backtrack is ever run; a ``json_schema`` is checked as an
inputs schema is (``registry.format.inputschema``: references inside it
only, its patterns in RE2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import re2

from registry.evals.dataset import (
    ASSERTION_KINDS,
    OUTCOMES,
    Assertion,
    Contains,
    Equals,
    JsonSchema,
    Judge,
    MaxLlmCalls,
    NotContains,
    OutcomeIs,
    Regex,
    ToolCalled,
)
from registry.evals.problems import Problems
from registry.format.definition import NAME_PATTERN
from registry.format.inputschema import InputsSchema, SchemaProblem
from registry.format.safeyaml import JsonPath, kind_of
from registry.models import close_matches, did_you_mean, json_pointer, shorten

REGEX_RULE = "eval-regex"
MAX_TEXT = 10_000
"""Characters of a ``contains`` or ``not_contains`` text."""
MAX_PATTERN = 1_000
MAX_LLM_CALLS = 10_000
EQUALS_KEYS = ("path", "value")
TOOL_CALLED_KEYS = ("name", "args")
JUDGE_KEYS = ("agent", "min_score", "expectation")

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def read_expect(value: Any, path: JsonPath, problems: Problems) -> tuple[Assertion, ...]:
    """The assertions of the list ``value`` at ``path`` (a problem for each bad one)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(f"expect must be a list of assertions, not {kind_of(value)}", path)
        return ()
    read = (read_assertion(item, path + (index,), problems) for index, item in enumerate(value))
    return tuple(assertion for assertion in read if assertion is not None)


def read_assertion(item: Any, path: JsonPath, problems: Problems) -> Assertion | None:
    """One assertion, or None after recording why it cannot be read."""
    if not isinstance(item, dict) or not item:
        problems.add(
            f"an assertion is a mapping of its kind to what it checks (- contains: text), not {kind_of(item)}",
            path,
            hint=f"the kinds are {', '.join(ASSERTION_KINDS)}",
        )
        return None
    if len(item) > 1:
        kinds = ", ".join(shorten(key, 30) for key in item)
        problems.add(
            f"an assertion has one kind, and this one has {len(item)} ({kinds})",
            path,
            hint="write each as its own item of expect",
        )
        return None
    [(kind, spec)] = item.items()
    reader = _READERS.get(kind)
    if reader is None:
        hint = did_you_mean(close_matches(str(kind), ASSERTION_KINDS))
        problems.add(
            f"unknown assertion {shorten(kind, 60)!r}" + (f"; {hint}" if hint else ""),
            path,
            key=kind,
            hint=f"the kinds are {', '.join(ASSERTION_KINDS)}",
        )
        return None
    return reader(spec, path + (kind,), problems)


def _text(spec: Any, path: JsonPath, problems: Problems) -> str | None:
    if not isinstance(spec, str) or not spec:
        problems.add(f"{path[-1]} takes a non-empty text, not {kind_of(spec)}", path)
        return None
    if len(spec) > MAX_TEXT:
        problems.add(f"{path[-1]} text is {len(spec)} characters long; the limit is {MAX_TEXT}", path)
        return None
    return spec


def _contains(spec: Any, path: JsonPath, problems: Problems) -> Contains | None:
    text = _text(spec, path, problems)
    return Contains(text) if text is not None else None


def _not_contains(spec: Any, path: JsonPath, problems: Problems) -> NotContains | None:
    text = _text(spec, path, problems)
    return NotContains(text) if text is not None else None


def _regex(spec: Any, path: JsonPath, problems: Problems) -> Regex | None:
    if not isinstance(spec, str) or not spec:
        problems.add(f"regex takes a regular expression (RE2), not {kind_of(spec)}", path)
        return None
    if len(spec) > MAX_PATTERN:
        problems.add(f"regex is {len(spec)} characters long; the limit is {MAX_PATTERN}", path, rule=REGEX_RULE)
        return None
    try:
        return Regex(spec, compiled_pattern(spec))
    except re2.error as exc:
        problems.add(
            f"regex {shorten(spec, 60)!r} is not a regular expression RE2 can run ({_re2_reason(exc)})",
            path,
            rule=REGEX_RULE,
            hint="RE2 matches in linear time and so has no backreferences or lookaround; rewrite it without them",
        )
        return None


@lru_cache(maxsize=1024)
def compiled_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises ``re2.error``. Cached: a dataset
    repeats its patterns case after case."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _re2_reason(exc: Exception) -> str:
    reason = exc.args[0] if exc.args else exc
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


def _json_schema(spec: Any, path: JsonPath, problems: Problems) -> JsonSchema | None:
    if not isinstance(spec, dict):
        problems.add(f"json_schema takes a JSON Schema (a mapping), not {kind_of(spec)}", path)
        return None
    try:
        return JsonSchema(spec, _validator(json.dumps(spec, sort_keys=True)))
    except SchemaProblem as exc:
        problems.add(f"json_schema {exc.message}", path + exc.path)
        return None


@lru_cache(maxsize=256)
def _validator(schema: str) -> InputsSchema:
    """The validator of a schema (as canonical JSON): checking a schema costs
    far more than one case, and a dataset repeats its schemas."""
    return InputsSchema(json.loads(schema))


def _equals(spec: Any, path: JsonPath, problems: Problems) -> Equals | None:
    if not isinstance(spec, dict) or "value" not in spec:
        problems.add(
            f"equals takes {{path, value}}: the value at a path of the parsed output, not {kind_of(spec)}", path
        )
        return None
    problems.check_keys(spec, path, EQUALS_KEYS, what="equals")
    where = spec.get("path", "")
    if not isinstance(where, str) or where.startswith(".") or where.endswith(".") or ".." in where:
        problems.add(
            f"equals.path is keys joined by dots (items.0.label), not {shorten(where, 40)!r}",
            path + ("path",),
        )
        return None
    return None if _at(problems, path) else Equals(where, spec["value"])


def _at(problems: Problems, path: JsonPath) -> bool:
    """Whether a problem was recorded at or under ``path``."""
    pointer = json_pointer(path)
    return any(issue.path == pointer or issue.path.startswith(pointer + "/") for issue in problems.issues)


def _tool_called(spec: Any, path: JsonPath, problems: Problems) -> ToolCalled | None:
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        problems.add(f"tool_called takes a tool's name, or {{name, args}}, not {kind_of(spec)}", path)
        return None
    problems.check_keys(spec, path, TOOL_CALLED_KEYS, what="tool_called")
    args = spec.get("args")
    if args is not None and not isinstance(args, dict):
        problems.add(f"tool_called.args is a mapping of arguments, not {kind_of(args)}", path + ("args",))
        return None
    return None if _at(problems, path) else ToolCalled(spec["name"], args)


def _outcome(spec: Any, path: JsonPath, problems: Problems) -> OutcomeIs | None:
    if spec not in OUTCOMES:
        hint = did_you_mean(close_matches(spec, OUTCOMES)) if isinstance(spec, str) else None
        problems.add(
            f"outcome is one of {', '.join(OUTCOMES)}, not {shorten(spec, 40)!r}" + (f"; {hint}" if hint else ""),
            path,
        )
        return None
    return OutcomeIs(spec)


def _max_llm_calls(spec: Any, path: JsonPath, problems: Problems) -> MaxLlmCalls | None:
    if isinstance(spec, bool) or not isinstance(spec, int) or not 1 <= spec <= MAX_LLM_CALLS:
        problems.add(f"max_llm_calls is a whole number from 1 to {MAX_LLM_CALLS}, not {shorten(spec, 40)}", path)
        return None
    return MaxLlmCalls(spec)


def _judge(spec: Any, path: JsonPath, problems: Problems) -> Judge | None:
    if isinstance(spec, str):
        spec = {"agent": spec}
    if not isinstance(spec, dict) or "agent" not in spec:
        problems.add(f"judge takes a judge agent, or {{agent, min_score, expectation}}, not {kind_of(spec)}", path)
        return None
    problems.check_keys(spec, path, JUDGE_KEYS, what="judge")
    agent = read_agent_name(spec["agent"], path + ("agent",), problems)
    min_score = spec.get("min_score")
    if min_score is not None and (
        isinstance(min_score, bool)
        or not isinstance(min_score, (int, float))
        or not math.isfinite(min_score)
        or not 0 <= min_score <= 1
    ):
        problems.add(f"judge.min_score is a number from 0 to 1, not {shorten(min_score, 40)}", path + ("min_score",))
    expectation = spec.get("expectation", "")
    if not isinstance(expectation, str) or len(expectation) > MAX_TEXT:
        problems.add(f"judge.expectation is a text of at most {MAX_TEXT} characters", path + ("expectation",))
    if agent is None or _at(problems, path):
        return None
    return Judge(agent, float(min_score) if min_score is not None else None, expectation)


def read_agent_name(value: Any, path: JsonPath, problems: Problems) -> str | None:
    """``usecase/name``, each part a name the registry serves; else a problem."""
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) != 2 or not all(NAME_PATTERN.fullmatch(part) for part in parts):
        problems.add(
            f"an agent is named usecase/name (support/triage), not {shorten(repr(value), 60)}",
            path,
            hint="each part is 1-64 characters of a-z, 0-9, '_' and '-'",
        )
        return None
    return str(value)


_READERS: Mapping[str, Callable[[Any, JsonPath, Problems], Assertion | None]] = {
    "contains": _contains,
    "not_contains": _not_contains,
    "json_schema": _json_schema,
    "equals": _equals,
    "regex": _regex,
    "tool_called": _tool_called,
    "outcome": _outcome,
    "max_llm_calls": _max_llm_calls,
    "judge": _judge,
}
