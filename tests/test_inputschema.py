"""Render inputs against an author's inputs schema: safe by construction."""

from __future__ import annotations

from typing import Any

import pytest

from registry.inputschema import InputsSchema, SchemaProblem


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_valid_inputs_have_no_issues_and_defaults_are_offered() -> None:
    schema = InputsSchema({**_schema(q={"type": "string"}, n={"type": "integer", "default": 3}), "required": ["q"]})
    assert schema.issues({"q": "x"}) == []
    assert schema.defaults() == {"n": 3}


def test_every_issue_is_reported_with_its_path() -> None:
    schema = InputsSchema(
        {**_schema(q={"type": "string"}, n={"type": "integer"}), "required": ["q", "r"], "additionalProperties": False}
    )
    issues = {(i.path, i.message) for i in schema.issues({"n": "three", "extra": 1})}
    assert ("/q", "missing required input 'q'") in issues
    assert ("/r", "missing required input 'r'") in issues
    assert ("/extra", "unexpected input 'extra'") in issues
    assert any(path == "/n" for path, _ in issues)


def test_local_references_resolve() -> None:
    schema = InputsSchema({**_schema(x={"$ref": "#/$defs/word"}), "$defs": {"word": {"type": "string"}}})
    assert schema.issues({"x": "ok"}) == []
    assert schema.issues({"x": 1})[0].path == "/x"


@pytest.mark.parametrize(
    "ref", ["http://127.0.0.1:9/x.json", "https://example.invalid/s.json", "file:///etc/passwd", "other.json", 5]
)
def test_references_outside_the_schema_are_refused(ref: Any) -> None:
    with pytest.raises(SchemaProblem) as caught:
        InputsSchema(_schema(x={"$ref": ref}))
    assert caught.value.path == ("properties", "x", "$ref")


def test_a_reference_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(SchemaProblem, match="does not resolve"):
        InputsSchema(_schema(x={"$ref": "#/$defs/missing"}))


def test_nested_ids_are_refused_but_a_top_level_one_is_fine() -> None:
    with pytest.raises(SchemaProblem, match=r"\$id"):
        InputsSchema(_schema(x={"$id": "urn:x", "type": "string"}))
    assert InputsSchema({**_schema(x={"type": "string"}), "$id": "urn:inputs"}).issues({"x": "y"}) == []


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=a)b", "(?<!a)b"])
def test_patterns_re2_cannot_run_are_refused(pattern: str) -> None:
    with pytest.raises(SchemaProblem, match="RE2"):
        InputsSchema(_schema(x={"type": "string", "pattern": pattern}))


def test_patterns_match_in_linear_time_with_search_semantics() -> None:
    schema = InputsSchema(_schema(x={"type": "string", "pattern": "^(a+)+$"}, y={"type": "string", "pattern": "b"}))
    assert [i.path for i in schema.issues({"x": "a" * 100_000 + "!"})] == ["/x"]
    assert schema.issues({"x": "aaa", "y": "abc"}) == []


def test_pattern_properties_and_additional_properties_use_re2() -> None:
    schema = InputsSchema(
        {"type": "object", "patternProperties": {"^tag_[a-z]+$": {"type": "string"}}, "additionalProperties": False}
    )
    assert schema.issues({"tag_x": "ok"}) == []
    issues = {(i.path, i.message) for i in schema.issues({"tag_x": 1, "other": 1})}
    assert ("/other", "unexpected input 'other'") in issues
    assert any(path == "/tag_x" for path, _ in issues)


def test_deep_input_against_a_recursive_schema_is_an_issue_not_a_crash() -> None:
    schema = InputsSchema(
        {**_schema(x={"$ref": "#/$defs/n"}), "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}
    )
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    assert schema.issues({"x": deep})[0].message == "inputs are nested too deeply to validate"


def test_an_invalid_json_schema_is_refused_with_its_path() -> None:
    with pytest.raises(SchemaProblem) as caught:
        InputsSchema(_schema(x={"type": 5}))
    assert caught.value.path[:2] == ("properties", "x")
