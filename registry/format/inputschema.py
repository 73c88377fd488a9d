"""Validating render inputs against an author's ``inputs`` JSON Schema.

The schema is untrusted, so jsonschema's defaults are not safe for it:

- a ``$ref`` to a URL would make the registry fetch it (jsonschema's default
  registry retrieves remote references, with no timeout). Only references
  inside the schema itself (``#...``) are allowed, each must resolve when the
  definition is loaded, and the validator's registry never retrieves;
- ``pattern``, ``patternProperties`` and ``additionalProperties`` run author
  regular expressions against caller strings; with Python's backtracking
  ``re`` a pattern such as ``^(a+)+$`` takes exponential time. Those keywords
  are re-implemented over RE2, which matches in linear time (and has no
  backreferences or lookaround: such patterns are refused at load);
- validating deeply nested inputs against a recursive schema recurses: inputs
  nested deeper than ``MAX_VALIDATED_DEPTH`` (``registry.format.inputbudget``)
  are reported as an input problem before jsonschema sees them, so it never
  reaches Python's recursion limit;
- validation costs time in proportion to the inputs, and a caller chooses
  them. So before any schema work one walk (``inputbudget.measure``) counts
  their values, depth and characters of text, and inputs over that budget are
  refused at once; what is validated then runs against a ``Deadline`` (a
  render's, which the render goes on to share), checked at every keyword
  jsonschema applies, and ``uniqueItems`` is checked in linear time
  (jsonschema compares unsortable items pairwise).

Most renders send valid inputs, and jsonschema's interpreter costs tens to
hundreds of microseconds per render. So each schema is also compiled by
jsonschema-rs (Rust, one to two orders of magnitude faster), which only ever
*accepts* inputs: whatever it does not accept is checked again by jsonschema,
which alone decides what is wrong and words every error. The two must agree
on what is valid, so jsonschema-rs never sees what it would judge
differently: a pattern runs natively only when Rust's regex engine reads it
as RE2 does (no ``\\s``, ``\\b``, flags or POSIX classes), and otherwise
through RE2 from a callback; schemas with ``patternProperties``,
``multipleOf`` (float division differs), references (a recursive schema would
recurse in native code as deep as the inputs nest), the ``unevaluated*``
keywords or the older drafts' ``dependencies`` and ``additionalItems`` stay
with jsonschema alone, and so do comparisons of ints past 2**53.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterator
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, NamedTuple

import jsonschema_rs
import re2
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from registry.format.inputbudget import input_pointer, measure, too_deep
from registry.models import Issue, close_matches, did_you_mean, shorten

_BASE_URI = "urn:prompt-registry:inputs"
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"does not match the pattern {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            _check_clock()  # keys x patterns searches, which no other keyword may come between
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = additional_keys(instance, schema)
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        yield ValidationError(f"unexpected properties: {', '.join(repr(k)[:80] for k in extras[:5])}")


def additional_keys(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Keys of ``instance`` that neither ``properties`` nor ``patternProperties`` cover."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    if not patterns:
        return [k for k in instance if k not in properties]
    extras = []
    for key in instance:
        _check_clock()
        if key not in properties and not any(_search(p, key) for p in patterns):
            extras.append(key)
    return extras


def _unique_items(validator: Any, unique: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    # jsonschema compares items pairwise when they cannot be sorted (objects):
    # quadratic time. Their hashable forms find a repeat in linear time.
    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            form = _hashable(item)
            if form in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(form)


def _hashable(value: Any) -> Any:
    """A hashable form of a JSON value, equal for values jsonschema finds
    equal: ``true`` is not ``1``, ``1`` is ``1.0``, key order does not matter."""
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, dict):
        return (dict, frozenset((key, _hashable(item)) for key, item in value.items()))
    if isinstance(value, list):
        return (list, tuple(_hashable(item) for item in value))
    return value


def _clocked(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """``keyword``, once the deadline is checked: every step of a validation
    applies a keyword, so none starts after the deadline."""

    def clocked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _check_clock()
        return keyword(validator, value, instance, schema)

    return clocked


_InputsValidator = validators.extend(
    Draft202012Validator,
    {
        name: _clocked(keyword)
        for name, keyword in {
            **Draft202012Validator.VALIDATORS,
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
            "uniqueItems": _unique_items,
        }.items()
    },
)


# Keywords whose presence keeps a schema off the native fast path (see above).
# A property *named* like one of them also does: that costs speed, never
# correctness.
_INTERPRETED_ONLY = frozenset(
    {
        "patternProperties",
        "multipleOf",
        "$ref",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "unevaluatedProperties",
        "unevaluatedItems",
        # Keywords of older drafts, which jsonschema ignores under 2020-12 and
        # jsonschema-rs still applies.
        "dependencies",
        "additionalItems",
    }
)
# Allowed at the top level only, where jsonschema ignores them (the dialect
# is always 2020-12 and no reference is resolved on the fast path).
_TOP_LEVEL_ONLY = ("$schema", "$id", "$vocabulary")


def _native_validator(schema: dict[str, Any]) -> jsonschema_rs.Draft202012Validator | None:
    """jsonschema-rs's validator for ``schema``, when it judges inputs as jsonschema does."""
    walked = list(_walk(schema, ()))
    if any(keyword in _INTERPRETED_ONLY for _, keyword, _ in walked) or _has_wide_int(schema):
        return None
    patterns = [value for _, keyword, value in walked if keyword == "pattern" and isinstance(value, str)]
    compiled = {key: value for key, value in schema.items() if key not in _TOP_LEVEL_ONLY}
    try:
        return jsonschema_rs.Draft202012Validator(
            compiled,
            validate_formats=False,
            pattern_options=jsonschema_rs.RegexOptions(),  # linear time, like RE2
            keywords=None if all(map(_read_alike, patterns)) else {"pattern": _RE2Pattern},
        )
    except Exception:  # any refusal just means no fast path; jsonschema checked the schema
        return None


# Past 2**53 not every int is a float: jsonschema-rs compares such an int with
# a float (a bound, an enum member, an array item) as two floats, rounding it,
# where jsonschema compares exactly. Schemas with such ints stay off the fast
# path; inputs with them skip it wherever the schema compares numbers.
_EXACT_INTS = 2**53
_COMPARING_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "const", "enum", "uniqueItems"}
)
_INTS_CHECKED = 10_000  # values; past them, give up looking and take jsonschema's path


def _out_of_time(seconds: float) -> Issue:
    return Issue(
        message=f"validating the inputs took longer than the limit of {seconds} seconds (shared with rendering)"
    )


class Deadline(NamedTuple):
    """When validation (and the render it is part of) must be done: ``at`` is
    a ``time.monotonic()`` value, ``seconds`` the time limit that set it."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """The deadline ``seconds`` from now."""
        return cls(time.monotonic() + seconds, seconds)


class _OutOfTime(Exception):
    """The deadline of the validation under way has passed."""


# The deadline of the validation under way in this thread (or task); the
# schemas, and their validators, are shared.
_deadline: ContextVar[float] = ContextVar("registry_inputs_deadline", default=math.inf)


def _check_clock() -> None:
    if time.monotonic() > _deadline.get():
        raise _OutOfTime


def _has_wide_int(value: Any) -> bool:
    """Whether ``value`` holds an int past 2**53, or more values than are worth checking."""
    pending = [value]
    seen = 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > _INTS_CHECKED:
            return True
        kind = type(item)
        if kind is int:
            if not -_EXACT_INTS <= item <= _EXACT_INTS:
                return True
        elif kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
    return False


# Escapes that mean the same to RE2 and to jsonschema-rs (which reads patterns
# as ECMA-262 does, then runs them on Rust's regex): the ASCII digit and word
# classes, and escaped punctuation or control characters.
_ALIKE_ESCAPES = frozenset("dDwWntr.^$|?*+()[]{}\\/-")


def _read_alike(pattern: str) -> bool:
    """Whether Rust's regex reads ``pattern`` exactly as RE2 does.

    Conservative: any construct not known to be read alike (``\\s``, ``\\b``,
    flags, named groups, POSIX classes, ``[]``, a brace that is not a counted
    repetition) sends the pattern through RE2 instead.
    """
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == "\\":
            if index + 1 == end or pattern[index + 1] not in _ALIKE_ESCAPES:
                return False
            index += 2
            continue
        if char == "(" and pattern.startswith("?", index + 1) and not pattern.startswith("?:", index + 1):
            return False
        if char == "[":
            index += 2 if pattern.startswith("^", index + 1) else 1
            if pattern.startswith("]", index) or "[:" in pattern:
                return False
            continue
        if char == "{" and _COUNTED.match(pattern, index) is None:
            return False
        index += 1
    return True


_COUNTED = re2.compile(r"\{[0-9]+(,[0-9]*)?\}")


class _RE2Pattern:
    """``pattern`` for jsonschema-rs, matched by RE2 as jsonschema's is here."""

    def __init__(self, parent_schema: Any, value: str, schema_path: Any) -> None:
        self._regex = _compiled(value)

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and self._regex.search(instance) is None:
            raise ValueError("does not match the pattern")


# Checking a schema, jsonschema compiles its patterns with Python's ``re``,
# which refuses RE2 syntax (``\\pL``) and warns on some (``[[:alpha:]]``).
# RE2 is the engine here: ``_check_pattern`` checks patterns with it.
_SCHEMA_FORMATS = FormatChecker([name for name in FormatChecker.checkers if name != "regex"])


class SchemaProblem(Exception):
    """The ``inputs`` schema cannot be used. ``message`` completes "inputs ...";
    ``path`` is inside the schema."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class InputsSchema:
    """A checked ``inputs`` schema and its validator."""

    def __init__(self, schema: dict[str, Any]) -> None:
        """Raise ``SchemaProblem`` unless the schema is valid and safe to run."""
        try:
            Draft202012Validator.check_schema(schema, format_checker=_SCHEMA_FORMATS)
        except SchemaError as exc:
            raise SchemaProblem(f"is not a valid JSON Schema: {exc.message}", tuple(exc.absolute_path)) from exc
        resource = DRAFT202012.create_resource(schema)
        registry: Registry[Any] = Registry().with_resource(_BASE_URI, resource)
        resolver = registry.resolver(base_uri=_BASE_URI)
        for path, keyword, value in _walk(schema, ()):
            if keyword in ("$ref", "$dynamicRef"):
                if not isinstance(value, str) or not value.startswith("#"):
                    raise SchemaProblem(
                        f"has {keyword} {str(value)[:80]!r}: only references inside the schema (#/...) are allowed",
                        path,
                    )
                try:
                    resolver.lookup(value)
                except Unresolvable as exc:
                    raise SchemaProblem(f"has {keyword} {value[:80]!r}, which does not resolve", path) from exc
            elif keyword in ("$id", "$schema", "$vocabulary") and path[:-1]:
                raise SchemaProblem(f"may not set {keyword} below its top level", path)
            elif keyword == "pattern" and isinstance(value, str):
                _check_pattern(value, path)
            elif keyword == "patternProperties" and isinstance(value, dict):
                for pattern in value:
                    _check_pattern(pattern, path + (pattern,))
        self.schema = schema
        self._validator = _InputsValidator(schema, registry=registry)
        self._native = _native_validator(schema)
        self._compares_numbers = any(keyword in _COMPARING_KEYWORDS for _, keyword, _ in _walk(schema, ()))
        properties = schema.get("properties", {})
        self._defaults = {k: s["default"] for k, s in properties.items() if isinstance(s, dict) and "default" in s}

    def with_defaults(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """A new dict: ``inputs`` over the top-level ``default`` values of the schema."""
        return {**self._defaults, **inputs}

    def issues(self, instance: Any, *, deadline: Deadline | None = None, measured: bool = False) -> list[Issue]:
        """Every way ``instance`` fails the schema, each at its JSON path.

        Over budget, the one issue is which budget: ``instance`` is measured
        first with ``measure``'s default limits (unless ``measured``: the
        caller has measured it with its own), and validation stops when
        ``deadline`` passes.
        """
        if not measured:
            excess = measure(instance)
            if excess is not None:
                return [excess.issue]
        native = self._native
        if (
            native is not None
            and not (self._compares_numbers and _has_wide_int(instance))
            and _natively_accepted(native, instance)
        ):
            return []
        # jsonschema recurses a dozen frames a level: nesting is bounded by
        # the budget, since at Python's recursion limit even the garbage
        # collector's finalizers fail. The except clause is a last line.
        token = _deadline.set(math.inf if deadline is None else deadline.at)
        try:
            errors = list(self._validator.iter_errors(instance))
            suggestions = _Suggestions(_MAX_SUGGESTIONS)
            return [issue for error in errors for issue in _issues_of(error, suggestions)]
        except _OutOfTime:
            return [_out_of_time(math.inf if deadline is None else deadline.seconds)]
        except RecursionError:
            return [too_deep(()).issue]
        except Unresolvable:  # every reference was resolved at load; kept as a last line
            return [Issue(message="the inputs schema has a reference that does not resolve")]
        finally:
            _deadline.reset(token)

    @property
    def has_fast_path(self) -> bool:
        """Whether valid inputs are accepted by the compiled (jsonschema-rs) validator."""
        return self._native is not None


def _natively_accepted(native: jsonschema_rs.Draft202012Validator, instance: Any) -> bool:
    try:
        return bool(native.is_valid(instance))
    except Exception:  # a value Rust cannot take: ask jsonschema
        return False


def _check_pattern(pattern: str, path: tuple[str | int, ...]) -> None:
    try:
        _compiled(pattern)
    except re2.error as exc:
        raise SchemaProblem(
            f"has pattern {pattern[:80]!r}, which RE2 cannot run: patterns use RE2 syntax"
            " (no backreferences or lookaround), which matches in linear time",
            path,
        ) from exc


def _walk(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    """Every (path, keyword, value) in a schema, depth first."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path + (key,), key, value
            yield from _walk(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, path + (index,))


# send thousands of unexpected inputs: only the first ones get a suggestion.
_MAX_SUGGESTIONS = 20


class _Suggestions:
    """Did-you-mean hints for unexpected inputs, at most ``limit`` per validation."""

    def __init__(self, limit: int) -> None:
        self._left = limit

    def hint(self, name: str, declared: Collection[str]) -> str | None:
        """The declared input most like ``name``, as a "did you mean", or None."""
        if self._left <= 0 or not declared:
            return None
        self._left -= 1
        return did_you_mean(close_matches(name, declared, limit=1))


def _issues_of(error: ValidationError, suggestions: _Suggestions) -> list[Issue]:
    path = tuple(error.absolute_path)
    required = error.validator_value
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(required, list):
        return [
            Issue(message=f"missing required input {shorten(name)!r}", path=input_pointer(path + (name,)))
            for name in required
            if name not in error.instance
        ]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        properties = schema.get("properties")
        # An input the caller already gives is no suggestion for another one.
        declared = [p for p in properties if p not in error.instance] if isinstance(properties, dict) else []
        return [
            Issue(message=_unexpected(name, suggestions.hint(name, declared)), path=input_pointer(path + (name,)))
            for name in additional_keys(error.instance, schema)
        ]
    return [Issue(message=_worded(error), path=input_pointer(path))]


def _worded(error: ValidationError) -> str:
    """jsonschema's message, short whatever the input: most quote the input
    first (``'xxx...' is too long``), so it is the quote that is cut."""
    message = error.message
    quoted = repr(error.instance)
    if len(quoted) > _QUOTED and message.startswith(quoted):
        message = shorten(quoted, _QUOTED) + message[len(quoted) :]
    return shorten(message, 300)


_QUOTED = 80


def _unexpected(name: str, hint: str | None) -> str:
    message = f"unexpected input {shorten(name)!r}"
    return f"{message} ({hint})" if hint else message
