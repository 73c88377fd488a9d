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
- validating deeply nested inputs against a recursive schema recurses; that is
  reported as an input problem, not a crash.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from registry.models import Issue, json_pointer, shorten

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
    return [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]


_InputsValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


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
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise SchemaProblem(f"is not a valid JSON Schema: {exc.message}", tuple(exc.absolute_path)) from exc
        resource = Resource(contents=schema, specification=DRAFT202012)
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

    def defaults(self) -> dict[str, Any]:
        """Top-level ``default`` values, applied for inputs that are not given."""
        properties = self.schema.get("properties", {})
        return {k: s["default"] for k, s in properties.items() if isinstance(s, dict) and "default" in s}

    def issues(self, instance: Any) -> list[Issue]:
        """Every way ``instance`` fails the schema, each at its JSON path."""
        try:
            errors = list(self._validator.iter_errors(instance))
        except RecursionError:
            return [Issue(message="inputs are nested too deeply to validate")]
        except Unresolvable:  # every reference was resolved at load; kept as a last line
            return [Issue(message="the inputs schema has a reference that does not resolve")]
        return [issue for error in errors for issue in _issues_of(error)]


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


def _input_pointer(path: tuple[str | int, ...]) -> str:
    # Input keys come from callers: a 100,000-character key stays short here.
    return json_pointer(tuple(shorten(p) if isinstance(p, str) else p for p in path))


def _issues_of(error: ValidationError) -> list[Issue]:
    path = tuple(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        return [
            Issue(message=f"missing required input {shorten(name)!r}", path=_input_pointer(path + (name,)))
            for name in error.validator_value
            if name not in error.instance
        ]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        return [
            Issue(message=f"unexpected input {shorten(name)!r}", path=_input_pointer(path + (name,)))
            for name in additional_keys(error.instance, schema)
        ]
    return [Issue(message=shorten(error.message, 300), path=_input_pointer(path))]
