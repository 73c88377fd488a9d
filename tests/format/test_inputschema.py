"""Render inputs against an author's inputs schema: safe by construction."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema._keywords
import pytest
import re2
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from registry.format.inputbudget import (
    MAX_VALIDATED_CHARS,
    MAX_VALIDATED_DEPTH,
    MAX_VALIDATED_VALUES,
    holds_more_values,
    measure,
)
from registry.format.inputschema import Deadline, InputsSchema, SchemaProblem, _read_alike
from tests.conftest import schema_says


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_valid_inputs_have_no_issues_and_defaults_are_offered() -> None:
    schema = InputsSchema({**_schema(q={"type": "string"}, n={"type": "integer", "default": 3}), "required": ["q"]})
    assert schema.issues({"q": "x"}) == []
    assert schema.with_defaults({"q": "x"}) == {"n": 3, "q": "x"}
    assert schema.with_defaults({"q": "x", "n": 5}) == {"n": 5, "q": "x"}


def test_every_issue_is_reported_with_its_path() -> None:
    schema = InputsSchema(
        {**_schema(q={"type": "string"}, n={"type": "integer"}), "required": ["q", "r"], "additionalProperties": False}
    )
    issues = {(i.path, i.message) for i in schema.issues({"n": "three", "extra": 1})}
    assert ("/q", "missing required input 'q'") in issues
    assert ("/r", "missing required input 'r'") in issues
    assert ("/extra", "unexpected input 'extra'") in issues
    assert any(path == "/n" for path, _ in issues)


def test_an_unexpected_input_names_the_closest_declared_one() -> None:
    schema = InputsSchema(
        {**_schema(question={"type": "string"}, rules={"type": "array"}), "additionalProperties": False}
    )
    (issue,) = schema.issues({"questoin": "Q"})
    assert (issue.path, issue.message) == ("/questoin", "unexpected input 'questoin' (did you mean 'question'?)")
    (issue,) = schema.issues({"nested": {"deep": 1}})
    assert issue.message == "unexpected input 'nested'"


def test_an_input_already_given_is_not_suggested_for_another() -> None:
    schema = InputsSchema({**_schema(question={"type": "string"}), "additionalProperties": False})
    (issue,) = schema.issues({"question": "Q", "questoin": "Q"})
    assert issue.message == "unexpected input 'questoin'"


def test_nested_unexpected_inputs_are_matched_against_their_own_object() -> None:
    schema = InputsSchema(
        _schema(opts={"type": "object", "properties": {"tone": {"type": "string"}}, "additionalProperties": False})
    )
    (issue,) = schema.issues({"opts": {"toen": "dry"}})
    assert (issue.path, issue.message) == ("/opts/toen", "unexpected input 'toen' (did you mean 'tone'?)")


def test_only_the_first_unexpected_inputs_get_a_suggestion() -> None:
    schema = InputsSchema({**_schema(question={"type": "string"}), "additionalProperties": False})
    issues = schema.issues({f"question{i:03}": i for i in range(100)})
    suggested = [i for i in issues if "did you mean" in i.message]
    assert len(issues) == 100 and 0 < len(suggested) < 100


def test_a_huge_input_is_quoted_short_and_the_reason_kept() -> None:
    schema = InputsSchema(_schema(s={"type": "string", "maxLength": 10}, n={"type": "integer"}))
    issues = {i.path: i.message for i in schema.issues({"s": "x" * 500_000, "n": ["y" * 500_000]})}
    # The quote of the input is cut; jsonschema's words after it are kept, whatever they are.
    too_long = schema_says({"maxLength": 10}, "x" * 500_000)[len(repr("x" * 500_000)) :]
    not_integer = schema_says({"type": "integer"}, ["y" * 500_000])[len(repr(["y" * 500_000])) :]
    assert issues == {"/s": "'" + "x" * 76 + "..." + too_long, "/n": "['" + "y" * 75 + "..." + not_integer}


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
    assert schema.issues({"x": deep})[0].message == "inputs are nested deeper than the limit of 48 levels"


def test_inputs_up_to_the_validated_depth_are_validated_and_deeper_ones_refused() -> None:
    schema = InputsSchema(
        {**_schema(x={"$ref": "#/$defs/n"}), "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}
    )

    def nested(levels: int) -> Any:
        value: Any = []
        for _ in range(levels - 1):
            value = [value]
        return value

    # {"x": ...} is one level: the arrays take the rest.
    assert schema.issues({"x": nested(MAX_VALIDATED_DEPTH)}) == []
    assert schema.issues({"x": nested(MAX_VALIDATED_DEPTH - 1) + ["not an array"]})  # still validated
    refused = schema.issues({"x": nested(MAX_VALIDATED_DEPTH + 1)})
    assert [issue.message for issue in refused] == ["inputs are nested deeper than the limit of 48 levels"]


def test_an_invalid_json_schema_is_refused_with_its_path() -> None:
    with pytest.raises(SchemaProblem) as caught:
        InputsSchema(_schema(x={"type": 5}))
    assert caught.value.path[:2] == ("properties", "x")


# The fast path (jsonschema-rs) only ever accepts; it must never accept what
# jsonschema, the reference, refuses. Schemas covering every keyword it runs.
_FAST_PATH_SCHEMAS: list[dict[str, Any]] = [
    {
        **_schema(
            s={"type": "string", "minLength": 2, "maxLength": 5},
            e={"enum": ["a", 1, None, [1], {"k": 1}]},
            c={"const": 1},
            n={"type": "number", "minimum": -1.5, "exclusiveMaximum": 10},
            i={"type": "integer", "exclusiveMinimum": 0, "maximum": 2**50},
            b={"type": "boolean"},
            z={"type": "null"},
            f={"type": "string", "format": "email"},
        ),
        "required": ["s"],
        "additionalProperties": False,
    },
    {
        **_schema(
            a={"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3, "uniqueItems": True},
            p={"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False},
            h={"type": "array", "contains": {"type": "string"}, "minContains": 2, "maxContains": 3},
            o={"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1, "maxProperties": 2},
            k={"type": "object", "propertyNames": {"maxLength": 1, "enum": ["a", "b", "c"]}},
        ),
        "dependentRequired": {"a": ["p"]},
        "dependentSchemas": {"h": {"required": ["o"]}},
    },
    {
        **_schema(
            x={"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]},
            y={"oneOf": [{"type": "number"}, {"type": "integer"}]},
            w={"allOf": [{"type": ["string", "null"]}, {"not": {"const": ""}}]},
            v={"if": {"type": "string"}, "then": {"minLength": 3}, "else": {"type": "array"}},
        ),
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:inputs",
    },
]
_KEYS = st.sampled_from(list("sencibzfaphokxywv") + ["extra"])
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, 1.0, 3, 10, 2**70, 2**70 + 1, -1.5, "", "a", "ab", "abcdef", "日本語", "🙂🙂"])
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=12,
)


@pytest.mark.slow  # hundreds of generated instances per schema, each checked by jsonschema too
@pytest.mark.parametrize("raw", _FAST_PATH_SCHEMAS, ids=["scalars", "containers", "combinators"])
def test_the_fast_path_accepts_exactly_what_jsonschema_accepts(raw: dict[str, Any]) -> None:
    schema = InputsSchema(raw)
    assert schema.has_fast_path
    reference = Draft202012Validator(raw)

    @given(st.dictionaries(_KEYS, _JSON, max_size=6))
    @settings(max_examples=400, deadline=None)
    def agrees(instance: dict[str, Any]) -> None:
        assert (schema.issues(instance) == []) == reference.is_valid(instance), instance

    agrees()


@pytest.mark.parametrize(
    "raw",
    [
        {"patternProperties": {"^x": {"type": "string"}}},
        _schema(x={"type": "number", "multipleOf": 0.01}),
        {**_schema(x={"$ref": "#/$defs/t"}), "$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}},
        {"unevaluatedProperties": False},
        {"not": {"dependencies": {"mode": ["other"]}}},  # 2019-09's; jsonschema-rs applies it under 2020-12
        {"prefixItems": [{"type": "string"}], "additionalItems": False},
    ],
    ids=["patternProperties", "multipleOf", "recursive-ref", "unevaluated", "dependencies", "additionalItems"],
)
def test_schemas_the_fast_path_would_judge_differently_are_left_to_jsonschema(raw: dict[str, Any]) -> None:
    assert not InputsSchema(raw).has_fast_path


# Patterns Rust's regex reads as RE2 does run natively; the others through RE2.
# Either way the verdict is RE2's, on strings chosen where engines differ.
_PATTERNS = [
    "^[a-z][a-z0-9_]*$",
    "^\\d{2,4}-\\w+$",
    "^a.b$",
    "^(?:ab|c)+?$",
    "^[^\\d]*$",
    "^é+\\.$",
    "^\\s*x$",  # ECMA's \s takes U+00A0 and U+2028, RE2's does not
    "\\bword\\b",
    "^[[:alpha:]]+$",
    "(?i)^k$",  # Unicode case folding takes the Kelvin sign
    "^\\pL+$",
]
_TRICKY_TEXT = st.text(alphabet=list("ab cxk-_.Kwordé\n\r\t\u00a0\u2028٣1234") + ["K", "[", ":", "é"], max_size=8)


@pytest.mark.slow  # 300 generated texts for each pattern, each matched by two engines
@pytest.mark.parametrize("pattern", _PATTERNS)
def test_patterns_are_judged_as_re2_judges_them(pattern: str) -> None:
    schema = InputsSchema(_schema(x={"type": "string", "pattern": pattern}))
    assert schema.has_fast_path

    @given(_TRICKY_TEXT)
    @settings(max_examples=300, deadline=None)
    def agrees(text: str) -> None:
        assert (schema.issues({"x": text}) == []) == (re2.search(pattern, text) is not None), text

    agrees()


@pytest.mark.parametrize(
    ("pattern", "alike"),
    [
        ("^[a-z][a-z0-9_]*$", True),
        ("^\\d{2,4}-\\w+\\.$", True),
        ("^(?:a|b)$", True),
        ("^a.b$", True),
        ("^\\s+$", False),
        ("\\bx", False),
        ("(?i)x", False),
        ("(?P<n>x)", False),
        ("^[[:alpha:]]$", False),
        ("[]a]", False),
        ("[^]a]", False),
        ("a{,3}", False),
        ("\\pL", False),
        ("x\\", False),
    ],
)
def test_which_patterns_run_natively(pattern: str, alike: bool) -> None:
    assert _read_alike(pattern) is alike


def test_re2_decides_patterns_even_for_unicode_digits() -> None:
    schema = InputsSchema(_schema(x={"type": "string", "pattern": "^\\d+$"}))
    assert schema.issues({"x": "123"}) == []
    assert schema.issues({"x": "١٢٣"})[0].path == "/x"  # Arabic-Indic digits: Unicode's \d, not RE2's


def test_values_the_fast_path_cannot_take_fall_back_to_jsonschema() -> None:
    schema = InputsSchema(_schema(x={"type": "integer", "maximum": 5}, s={"type": "string"}))
    assert schema.has_fast_path
    assert schema.issues({"x": 10**400})[0].path == "/x"
    assert schema.issues({"x": -(10**400)}) == []
    assert schema.issues({"s": "\ud800"}) == []  # a lone surrogate is still a string; the request layer refuses it


def test_every_bundled_inputs_schema_takes_the_fast_path() -> None:
    from registry.settings import BUNDLED_LIBRARY

    schemas = [
        yaml.safe_load(path.read_text())["inputs"]
        for path in Path(BUNDLED_LIBRARY, "ai_gateway", "agents").glob("*/*.yml")
        if "inputs:" in path.read_text()
    ]
    assert len(schemas) >= 10
    assert all(InputsSchema(raw).has_fast_path for raw in schemas)


@pytest.mark.parametrize(("pattern", "good", "bad"), [("^\\pL+$", "héllo", "h3llo"), ("^[[:digit:]]+$", "42", "4x")])
def test_re2_syntax_python_re_lacks_is_accepted(pattern: str, good: str, bad: str) -> None:
    schema = InputsSchema(_schema(x={"type": "string", "pattern": pattern}))
    assert schema.issues({"x": good}) == []
    assert schema.issues({"x": bad})[0].path == "/x"


def test_one_schema_is_shared_by_threads() -> None:
    # gunicorn's threads and a gateway's threads share each compiled agent.
    schema = InputsSchema(_schema(x={"type": "string", "pattern": "^\\s*a$"}, y={"type": "integer"}))
    failures: list[str] = []

    def validate() -> None:
        for _ in range(500):
            if schema.issues({"x": " a", "y": 1}) or not schema.issues({"x": "b", "y": "1"}):
                failures.append("wrong verdict")

    threads = [threading.Thread(target=validate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize(
    ("raw", "instance"),
    [
        ({"maximum": 4611686018427387904.0}, 4611686018427387905),  # 2**62 as a float; 2**62 + 1
        ({"exclusiveMaximum": 9.223372036854776e18}, 9223372036854775808),
        ({"minimum": 18446744073709551617}, 1.8446744073709552e19),  # a wide int in the schema
        ({"type": "array", "uniqueItems": True}, [9223372036854775808, 9223372036854775808.0]),
        ({"enum": [9007199254740993]}, 9007199254740992.0),
        (_schema(n={"type": "integer", "maximum": 4611686018427387904.0}), {"n": 4611686018427387905}),
    ],
)
def test_ints_past_two_to_the_53_are_compared_exactly(raw: dict[str, Any], instance: Any) -> None:
    # jsonschema-rs compares such ints with floats as floats; jsonschema, exactly.
    assert not Draft202012Validator(raw).is_valid(instance)
    assert InputsSchema(raw).issues(instance)


def test_wide_ints_only_matter_where_numbers_are_compared() -> None:
    schema = InputsSchema(_schema(n={"type": "integer"}, s={"type": "string"}))
    assert schema.has_fast_path
    assert schema.issues({"n": 2**80, "s": "x"}) == []
    assert InputsSchema({"maximum": 2**60}).has_fast_path is False


# --- the input budget ------------------------------------------------------------------------

VALUES_OVER = f"inputs hold more than the limit of {MAX_VALIDATED_VALUES:,} values (each array, object, string, number, boolean or null)"
DEPTH_OVER = f"inputs are nested deeper than the limit of {MAX_VALIDATED_DEPTH} levels"
TEXT_OVER = f"inputs hold more than the limit of {MAX_VALIDATED_CHARS:,} characters of text (strings and keys)"


def _nested(levels: int, inner: Any = None) -> Any:
    value: Any = [] if inner is None else inner
    for _ in range(levels - 1):
        value = [value]
    return value


def test_ordinary_inputs_are_within_every_budget() -> None:
    assert measure({"code": "def f():\n    pass\n" * 500, "language": "python", "tags": ["a", "b"], "n": 3}) is None
    assert measure({"files": [{"path": f"src/{i}.py", "additions": i, "deletions": 0} for i in range(2000)]}) is None
    assert measure("x" * MAX_VALIDATED_CHARS) is None and measure(5) is None


def test_values_are_counted_at_every_level_and_reported_at_their_input() -> None:
    assert measure({"a": list(range(MAX_VALIDATED_VALUES - 1))}) is None  # the list and its items
    (excess,) = [measure({"a": 1, "b": list(range(MAX_VALIDATED_VALUES))})]
    assert excess is not None and excess.budget == "values"
    assert (excess.issue.path, excess.issue.message) == ("/b", VALUES_OVER)
    nested = measure({"a": [{"k": [1, 2, 3]}] * 2500})  # 2,500 x 5 values
    assert nested is not None and nested.issue.path == "/a"
    at_the_top = measure({str(i): i for i in range(MAX_VALIDATED_VALUES + 1)})
    assert at_the_top is not None and at_the_top.issue.path == ""


def test_depth_is_measured_as_jsonschema_would_recurse() -> None:
    # {"x": ...} is one level: the arrays take the rest.
    assert measure({"x": _nested(MAX_VALIDATED_DEPTH)}) is None
    assert measure({"x": _nested(MAX_VALIDATED_DEPTH - 1, ["not an array"])}) is None
    for deep in (_nested(MAX_VALIDATED_DEPTH + 1), _nested(MAX_VALIDATED_DEPTH, [1]), _nested(100_000)):
        excess = measure({"ok": 1, "x": deep})
        assert excess is not None and (excess.budget, excess.issue.path, excess.issue.message) == (
            "depth",
            "/x",
            DEPTH_OVER,
        )


def test_text_counts_strings_and_keys() -> None:
    half = MAX_VALIDATED_CHARS // 2
    assert measure({"a": "x" * half, "b": "y" * (half - 2)}) is None
    over = measure({"a": "x" * half, "b": ["y" * half]})
    assert over is not None and (over.budget, over.issue.path, over.issue.message) == ("text", "/b", TEXT_OVER)
    keys = measure({"a": {"k" * half: 1, "j" * half: 2}})
    assert keys is not None and keys.budget == "text"
    assert measure({"k" * (MAX_VALIDATED_CHARS + 1): 1}) is not None
    first = measure({"a": "x" * (MAX_VALIDATED_CHARS + 1), "b": [], "c": "y"})
    assert first is not None and first.issue.path == "/a"  # the input that took the text past the limit


def test_limits_can_be_given() -> None:
    assert measure({"a": [1, 2, 3]}, max_values=4) is None  # the list and its items
    assert measure({"a": [1, 2, 3]}, max_values=3) is not None
    assert measure({"a": "abc"}, max_chars=4) is None  # the key and the string
    assert measure({"a": "abc"}, max_chars=3) is not None


# The hostile bodies, each as big as a 1 MiB request: refused from what one
# walk counts, before any schema work (jsonschema took 0.5-0.8 s on them).
PASSAGES = {
    "type": "object",
    "properties": {
        "question": {"type": "string"},
        "passages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["title", "text"],
                "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
            },
        },
    },
}
WIDE = {"question": "q", "passages": [{"title": "t", "text": "abcdefg"}] * 33_822 + [{"title": "t", "text": 1}]}
WIDE_AND_DEEP = {"question": "q", "passages": [_nested(40)] * 13_000}


@pytest.mark.parametrize(
    ("inputs", "message"),
    [(WIDE, VALUES_OVER), (WIDE_AND_DEEP, VALUES_OVER), ({"passages": _nested(900)}, DEPTH_OVER)],
    ids=["wide", "wide-and-deep", "deep"],
)
def test_hostile_inputs_are_refused_before_any_schema_work(
    inputs: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = InputsSchema(PASSAGES)

    class NoSchemaWork:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"validated ({name})")

    monkeypatch.setattr(schema, "_native", NoSchemaWork())
    monkeypatch.setattr(schema, "_validator", NoSchemaWork())
    assert [(i.path, i.message) for i in schema.issues(inputs)] == [("/passages", message)]


def test_validation_stops_at_its_deadline() -> None:
    schema = InputsSchema(_schema(n={"type": "array", "items": {"type": "integer", "multipleOf": 1}}))
    assert not schema.has_fast_path  # multipleOf: jsonschema alone
    inputs = {"n": [*range(5000), "x"]}
    assert [i.path for i in schema.issues(inputs, deadline=Deadline.after(60))] == ["/n/5000"]
    passed = Deadline(at=time.monotonic() - 0.001, seconds=2.0)
    (issue,) = schema.issues(inputs, deadline=passed)
    assert issue.message == "validating the inputs took longer than the limit of 2.0 seconds (shared with rendering)"
    assert schema.issues({"n": [1, 2]}, deadline=passed) == [issue]


def test_unique_items_are_checked_without_comparing_every_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    # jsonschema compares objects pairwise: 6,000 of them took minutes.
    def pairwise(container: Any) -> bool:
        raise AssertionError("compared pairwise")

    monkeypatch.setattr(jsonschema._keywords, "uniq", pairwise)
    schema = InputsSchema(_schema(xs={"type": "array", "uniqueItems": True, "items": {"multipleOf": 1}}))
    distinct = [{"a": i} for i in range(3000)]
    assert schema.issues({"xs": distinct}) == []
    assert [i.path for i in schema.issues({"xs": [*distinct, {"a": 5}]})] == ["/xs"]


@pytest.mark.parametrize(
    "items",
    [
        [1, True],
        [0, False],
        [1, 1.0],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [[1], [True]],
        [[1, 2], [2, 1]],
        [{"a": [1]}, {"a": [1.0]}],
        [{"a": None}, {"b": None}],
        [None, None],
        ["1", 1],
        [[], {}],
    ],
)
def test_unique_items_means_what_it_means_to_jsonschema(items: list[Any]) -> None:
    raw = {"type": "array", "uniqueItems": True, "items": {"$ref": "#/$defs/any"}, "$defs": {"any": {}}}
    assert not InputsSchema(raw).has_fast_path
    assert bool(InputsSchema(raw).issues(items)) == (not Draft202012Validator(raw).is_valid(items))


def _same_json(a: Any, b: Any) -> bool:
    """JSON Schema's equality: numbers by value, booleans apart from numbers,
    arrays item by item, objects member by member."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


def _unique(items: list[Any]) -> bool:
    return not any(_same_json(items[i], items[j]) for i in range(len(items)) for j in range(i + 1, len(items)))


@pytest.mark.slow  # hundreds of generated instances per schema, each checked by jsonschema too
@given(st.lists(_JSON, max_size=6))
@settings(max_examples=400, deadline=None)
def test_unique_items_agrees_with_jsonschema_on_any_json(items: list[Any]) -> None:
    raw = {"type": "array", "uniqueItems": True, "items": {"$ref": "#/$defs/any"}, "$defs": {"any": {}}}
    ours = InputsSchema(raw).issues(items) == []
    # JSON Schema's own definition decides; jsonschema's answer is compared
    # where it follows that definition (see the test below for where not).
    assert ours == _unique(items), items
    if Draft202012Validator(raw).is_valid(items) == _unique(items):
        assert ours == Draft202012Validator(raw).is_valid(items), items


def test_unique_items_where_jsonschema_is_wrong() -> None:
    """jsonschema 4.26 calls [[0], [False], [0]] unique: its check sorts the
    items and compares neighbours, and False sorts between the two [0]s."""
    raw = {"type": "array", "uniqueItems": True}
    items = [[0], [False], [0]]
    assert not _unique(items)
    assert InputsSchema(raw).issues(items) != []


def _structure(value: Any, *, top: bool = True) -> tuple[int, int]:
    """Commas outside strings, and arrays and objects below the top, of
    ``json.dumps(value)``: what holds_more_values counts."""
    if isinstance(value, (list, dict)):
        members = list(value.values()) if isinstance(value, dict) else value
        commas, containers = max(len(members) - 1, 0), 0 if top else 1
        for member in members:
            more_commas, more_containers = _structure(member, top=False)
            commas, containers = commas + more_commas, containers + more_containers
        return commas, containers
    return 0, 0


# Strings full of what the scan looks for: quotes, escapes, commas, brackets.
_STRUCTURAL_TEXT = st.text(alphabet=st.sampled_from(list('",[]{}\\:ab\n\u00e9\ud83d\ude42')), max_size=8)
_STRUCTURAL_JSON = st.recursive(
    st.none() | st.integers() | _STRUCTURAL_TEXT,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_STRUCTURAL_TEXT, children, max_size=5),
    max_leaves=40,
)


@pytest.mark.slow  # hundreds of generated instances per schema, each checked by jsonschema too
@given(_STRUCTURAL_JSON, st.integers(min_value=0, max_value=12), st.booleans(), st.sampled_from([None, 1]))
@settings(max_examples=600, deadline=None)
def test_values_counted_before_parsing_match_the_structure(
    value: Any, limit: int, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode("utf-8", "surrogatepass")
    commas, containers = _structure(value)
    assert holds_more_values(text, limit) == (max(commas, containers) > limit)
    if holds_more_values(text, limit):
        assert measure(value, max_values=limit) is not None  # never refuses what measure accepts


def test_commas_and_brackets_inside_strings_are_not_counted() -> None:
    text = json.dumps({"inputs": {"diff": ",[{" * 50_000, "quoted": '\\",[' * 1000}}).encode()
    assert not holds_more_values(text, 10)


def test_unbalanced_text_is_left_to_the_parser() -> None:
    assert not holds_more_values(b"[" * 100_000, 10)
    assert not holds_more_values(b'{"inputs": [' + b"1," * 50_000, 10)
