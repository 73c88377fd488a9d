"""The playground's form: fields from an inputs schema, and a submitted form back to inputs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.datastructures import ImmutableMultiDict

from registry.serving.ui.forms import (
    MAX_DEPTH,
    MAX_FIELDS,
    WHOLE_INPUTS,
    Field,
    FormError,
    form_fields,
    inputs_from_form,
)

AGENTS = Path(__file__).resolve().parents[3] / "library" / "ai_gateway" / "agents"
DEFINITIONS = {
    path.relative_to(AGENTS).as_posix(): yaml.safe_load(path.read_text()) for path in sorted(AGENTS.glob("*/*.yml"))
}
EXAMPLES = [
    pytest.param(definition["inputs"], example["inputs"], id=f"{agent}:{example['name']}")
    for agent, definition in DEFINITIONS.items()
    for example in definition.get("examples") or []
]

# Every kind the form knows, and one thing it does not (`choice`).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "count", "flag", "page", "tags"],
    "additionalProperties": False,
    "properties": {
        "title": {"type": "string", "maxLength": 100, "pattern": "^[^x]*$"},
        "body": {"type": "string", "description": "Long text."},
        "count": {"type": "integer", "minimum": 1, "maximum": 10**400},
        "ratio": {"type": "number", "default": 0.5},
        "flag": {"type": "boolean"},
        "maybe": {"type": "boolean"},
        "level": {"enum": ["low", "high", 3, None]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "notes": {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]},
        "rows": {"type": "array", "items": {"type": "object"}},
        "page": {
            "type": "object",
            "required": ["kind"],
            "additionalProperties": False,
            "properties": {
                "kind": {"type": "string", "enum": ["issue", "epic"]},
                "note": {"type": "string"},
                "size": {"type": "integer"},
            },
        },
        "meta": {
            "type": "object",
            "required": ["a"],
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        },
        "choice": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
}


def flatten(fields: tuple[Field, ...]) -> Iterator[Field]:
    for field in fields:
        yield field
        yield from flatten(field.children)


def by_name(fields: tuple[Field, ...]) -> dict[str, Field]:
    return {field.name: field for field in flatten(fields)}


def submitted(fields: tuple[Field, ...]) -> dict[str, str]:
    """What a browser submits for the fields as shown: each control's text, a checkbox only when checked."""
    form: dict[str, str] = {}
    for field in flatten(fields):
        if field.kind == "checkbox":
            if field.default == "true":
                form[field.name] = "true"
        elif field.kind != "fieldset":
            form[field.name] = field.default or ""
    return form


def round_trip(schema: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    inputs, errors = inputs_from_form(schema, submitted(form_fields(schema, values=values)))
    assert errors == []
    return inputs


@pytest.mark.parametrize("agent", DEFINITIONS)
def test_every_library_schema_gives_fields_with_unique_names(agent: str) -> None:
    schema = DEFINITIONS[agent].get("inputs")
    fields = form_fields(schema)
    names = [field.name for field in flatten(fields)]
    assert names and len(names) == len(set(names))
    inputs, errors = inputs_from_form(schema, {})
    assert errors == []
    assert isinstance(inputs, dict)


@pytest.mark.parametrize(("schema", "example"), EXAMPLES)
def test_an_example_submitted_as_shown_gives_its_inputs_back(schema: Any, example: dict[str, Any]) -> None:
    assert round_trip(schema, example) == json.loads(json.dumps(example))


def test_library_schemas_become_the_controls_they_describe() -> None:
    chat = by_name(form_fields(DEFINITIONS["chat/tool_calling.yml"]["inputs"]))
    assert (chat["question"].kind, chat["question"].required, chat["question"].min_length) == ("text", True, 1)
    assert chat["tools"].kind == "json"
    assert chat["page"].kind == "fieldset" and not chat["page"].required
    assert chat["page.kind"].options == ("issue", "merge_request", "epic", "file", "pipeline", "job")

    commit = by_name(form_fields(DEFINITIONS["commit_message/conventional.yml"]["inputs"]))
    assert commit["types"].kind == "textarea" and commit["types"].lines
    assert commit["types"].default == "feat\nfix\ndocs\nrefactor\nperf\ntest\nbuild\nci\nchore"
    subject = commit["max_subject_length"]
    assert (subject.kind, subject.default, subject.minimum, subject.maximum) == ("integer", "72", 30, 120)

    # An optional boolean may be left out, which a checkbox cannot say.
    flag = by_name(form_fields(DEFINITIONS["ci/root_cause.yml"]["inputs"]))["log_truncated"]
    assert (flag.kind, flag.options, flag.default) == ("select", ("true", "false"), "false")

    triage = by_name(form_fields(DEFINITIONS["assistant/tools_triage.yml"]["inputs"]))
    assert (triage["title"].kind, triage["title"].max_length) == ("text", 255)

    assert form_fields(DEFINITIONS["commit_message/one_line.yml"].get("inputs")) == (
        Field(name=WHOLE_INPUTS, label="inputs", kind="json", required=False, description=None, default=None),
    )
    seed = by_name(form_fields(DEFINITIONS["chat/minimal.yml"]["inputs"]))
    assert (seed["question"].kind, seed["question"].required, seed["tools"].kind) == ("text", False, "json")


def test_values_replace_the_schema_defaults_and_leave_the_rest_empty() -> None:
    shown = by_name(form_fields(SCHEMA))
    assert (shown["ratio"].default, shown["notes"].default, shown["title"].default) == ("0.5", "a\nb", None)
    # A bound past what a float holds is no hint.
    assert (shown["count"].minimum, shown["count"].maximum) == (1, None)
    shown = by_name(form_fields(SCHEMA, values={"title": "T", "page": {"kind": "epic"}}))
    assert (shown["ratio"].default, shown["notes"].default, shown["title"].default) == (None, None, "T")
    assert shown["page.kind"].default == "epic"


def test_each_kind_reads_its_text() -> None:
    form = {
        "title": "A title",
        "body": "line one\r\nline two",
        "count": " 7 ",
        "ratio": "1e3",
        "flag": "on",
        "maybe": "false",
        "level": "3",
        "tags": "bug\r\n\r\n  ui \n",
        "rows": '[{"a": [1, null]}]',
        "page.kind": "issue",
        "page.size": "-2",
        "choice": '"x"',
    }
    inputs, errors = inputs_from_form(SCHEMA, form)
    assert errors == []
    assert inputs == {
        "title": "A title",
        "body": "line one\nline two",
        "count": 7,
        "ratio": 1000.0,
        "flag": True,
        "maybe": False,
        "level": 3,
        "tags": ["bug", "  ui "],
        "rows": [{"a": [1, None]}],
        "page": {"kind": "issue", "size": -2},
        "choice": "x",
    }
    inputs, _ = inputs_from_form(SCHEMA, {"ratio": "2", "level": "null"})
    assert (inputs["ratio"], inputs["level"]) == (2, None)
    assert isinstance(inputs["ratio"], int)


def test_an_unknown_option_is_passed_on_for_the_server_to_report() -> None:
    inputs, errors = inputs_from_form(SCHEMA, {"level": "medium", "page.kind": "wiki"})
    assert errors == []
    assert (inputs["level"], inputs["page"]["kind"]) == ("medium", "wiki")


def test_empty_fields_are_left_out_unless_required_text() -> None:
    inputs, errors = inputs_from_form(SCHEMA, submitted(form_fields(SCHEMA, values={})))
    assert errors == []
    # `count` has no empty reading: left out, the server says it is required.
    assert inputs == {"title": "", "flag": False, "tags": [], "page": {}}


def test_an_optional_fieldset_is_sent_only_when_something_in_it_is_filled_in() -> None:
    assert "meta" not in inputs_from_form(SCHEMA, {"meta.a": "", "meta.b": ""})[0]
    # Once it is, its required fields are sent as they read empty, for the server to report.
    assert inputs_from_form(SCHEMA, {"meta.b": "x"})[0]["meta"] == {"b": "x"}


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("count", "12a", "'12a' is not a whole number"),
        ("count", "1.5", "'1.5' is not a whole number"),
        ("count", "1" + "0" * 400, "too many digits for a number"),
        ("ratio", "abc", "'abc' is not a number"),
        ("ratio", "NaN", "'NaN' is not a number"),
        ("ratio", "1e400", "'1e400' is out of range"),
        ("rows", '[{"a": 1}', "not valid JSON: Expecting ',' delimiter (line 1, column 10)"),
        ("rows", "[NaN]", "not valid JSON: NaN is not a number JSON allows"),
        ("rows", "[1e999]", "not valid JSON: 1e999 is out of range"),
        ("rows", "[" + "9" * 5000 + "]", "not valid JSON: a number has too many digits"),
        ("rows", "[" * 100_000, "not valid JSON: nested too deeply"),
    ],
)
def test_text_that_does_not_read_is_a_form_error_naming_the_field(field: str, text: str, message: str) -> None:
    inputs, errors = inputs_from_form(SCHEMA, {field: text, "title": "t"})
    assert errors == [FormError(field, message)]
    assert field not in inputs and inputs["title"] == "t"


def test_without_a_schema_one_json_field_holds_the_inputs() -> None:
    (field,) = form_fields(None, values={"q": "x"})
    assert (field.name, field.kind, json.loads(field.default or "")) == (WHOLE_INPUTS, "json", {"q": "x"})
    assert inputs_from_form(None, {WHOLE_INPUTS: '{"q": "x"}'}) == ({"q": "x"}, [])
    assert inputs_from_form(None, {WHOLE_INPUTS: " "}) == ({}, [])
    assert inputs_from_form(None, {WHOLE_INPUTS: "[1]"}) == ({}, [FormError(WHOLE_INPUTS, "not a JSON object")])


@pytest.mark.parametrize(
    "schema",
    [
        "a string",
        ["a", "list"],
        {"type": "string"},
        {"type": "object"},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": ["q"]},
        {"type": "object", "properties": {"q": {}}, "anyOf": [{"required": ["q"]}]},
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_FIELDS + 1)}},
    ],
)
def test_a_schema_without_properties_to_show_gets_the_whole_inputs_field(schema: Any) -> None:
    assert [field.name for field in form_fields(schema)] == [WHOLE_INPUTS]


def test_odd_property_schemas_become_json_fields() -> None:
    odd = {
        "const": {"const": "x"},
        "union": {"type": ["string", "null"]},
        "anything": {},
        "true": True,
        "number_list": {"type": "array", "items": {"type": "integer"}},
        "free": {"type": "object", "additionalProperties": {"type": "string"}},
        "weird_type": {"type": 5},
        "no_properties": {"type": "object", "properties": {}},
        "bad_enum": {"enum": "abc"},
        "ambiguous_enum": {"enum": ["1", 1]},
        "empty_option": {"enum": ["", "a"]},
        "remote": {"$ref": "https://example.com/schema.json"},
    }
    fields = form_fields({"type": "object", "properties": odd})
    assert {field.name: field.kind for field in fields} == dict.fromkeys(odd, "json")


def test_a_local_ref_is_resolved_one_level() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "level": {"enum": ["low", "high"]},
            "node": {"type": "object", "properties": {"label": {"type": "string"}, "next": {"$ref": "#/$defs/node"}}},
        },
        "properties": {
            "level": {"$ref": "#/$defs/level", "description": "How much."},
            "node": {"$ref": "#/$defs/node"},
            "narrowed": {"$ref": "#/$defs/level", "maxLength": 3},
            "missing": {"$ref": "#/$defs/nothing"},
        },
    }
    fields = by_name(form_fields(schema))
    assert (fields["level"].kind, fields["level"].options, fields["level"].description) == (
        "select",
        ("low", "high"),
        "How much.",
    )
    assert (fields["node"].kind, fields["node.label"].kind, fields["node.next"].kind) == ("fieldset", "text", "json")
    assert (fields["narrowed"].kind, fields["missing"].kind) == ("json", "json")


def test_objects_nest_up_to_the_depth_limit_then_become_json() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for level in range(MAX_DEPTH + 2):
        schema = {"type": "object", "properties": {f"l{level}": schema}}
    names = {field.name: field.kind for field in flatten(form_fields(schema))}
    assert names == {"l5": "fieldset", "l5.l4": "fieldset", "l5.l4.l3": "fieldset", "l5.l4.l3.l2": "json"}


def test_too_many_nested_fields_fold_the_nested_objects_into_json() -> None:
    group = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(30)}}
    schema = {"type": "object", "properties": {f"g{i}": group for i in range(10)}}
    fields = form_fields(schema)
    assert [(field.name, field.kind) for field in flatten(fields)] == [(f"g{i}", "json") for i in range(10)]


def test_names_escape_dots_and_tildes_so_they_stay_unique() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a.b": {"type": "string"},
            "a": {"type": "object", "properties": {"b": {"type": "string"}, "~extra": {"type": "string"}}},
        },
    }
    values = {"a.b": "dotted", "a": {"b": "nested", "~extra": "tilde", "undeclared": [1]}}
    fields = by_name(form_fields(schema, values=values))
    assert list(fields) == ["a~1b", "a", "a.b", "a.~0extra", "a.~extra"]
    assert round_trip(schema, values) == values


def test_undeclared_properties_of_an_open_object_travel_in_a_json_field() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    fields = form_fields(schema, values={"q": "x", "extra": {"n": 1}})
    assert [(field.name, field.kind) for field in fields] == [("q", "text"), ("~extra", "json")]
    assert round_trip(schema, {"q": "x", "extra": {"n": 1}}) == {"q": "x", "extra": {"n": 1}}
    assert inputs_from_form(schema, {"~extra": '{"q": "y"}'}) == (
        {},
        [FormError("~extra", "declared properties have their own fields: q")],
    )
    closed = {**schema, "additionalProperties": False}
    assert [field.name for field in form_fields(closed, values={"q": "x", "extra": 1})] == ["q"]


@pytest.mark.parametrize(
    ("items", "kind"),
    [
        (["one", "two"], "textarea"),
        (["has\nbreak"], "json"),
        (["", "empty first"], "json"),
        ([" "], "json"),
        ([], "json"),
        (['["looks", "like json"]'], "json"),
        (["[1] a citation", "[2] another"], "textarea"),
    ],
)
def test_string_lists_one_item_a_line_cannot_carry_are_shown_as_json(items: list[str], kind: str) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    (field,) = form_fields(schema, values={"tags": items})
    assert field.kind == kind
    assert round_trip(schema, {"tags": items}) == {"tags": items}


def test_short_strings_are_single_lines_unless_their_value_has_a_line_break() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 80, "pattern": "^[a-z]+$"},
            "slug": {"type": "string", "pattern": "[a-z]"},
            "either": {"type": "string", "pattern": "^a$|^b$"},
            "long": {"type": "string", "maxLength": 256},
        },
    }
    fields = by_name(form_fields(schema))
    assert [(f.kind, f.pattern) for f in fields.values()] == [
        ("text", "^[a-z]+$"),
        ("text", None),
        ("text", None),
        ("textarea", None),
    ]
    assert by_name(form_fields(schema, values={"title": "two\nlines"}))["title"].kind == "textarea"


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ({}, "text"),
        ({"description": "Language identifier, e.g. python"}, "text"),
        ({"minLength": 1}, "text"),
        ({"maxLength": 255}, "text"),
        ({"maxLength": 20000}, "textarea"),
        ({"maxLength": 20000, "x-multiline": False}, "text"),
        ({"x-multiline": True}, "textarea"),
        ({"x-multiline": "yes"}, "text"),
        ({"contentMediaType": "text/markdown"}, "textarea"),
        ({"format": "email"}, "text"),
    ],
)
def test_a_string_is_one_line_unless_the_schema_asks_for_long_text(spec: dict[str, Any], kind: str) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", **spec}}}
    assert by_name(form_fields(schema))["s"].kind == kind
    assert by_name(form_fields(schema, values={"s": "two\nlines"}))["s"].kind == "textarea"


def test_a_werkzeug_multidict_and_non_text_values_are_read() -> None:
    form = ImmutableMultiDict([("count", "3"), ("count", "4"), ("title", "t")])
    assert inputs_from_form(SCHEMA, form)[0]["count"] == 3
    inputs, errors = inputs_from_form(SCHEMA, {"count": 3, "title": None})
    assert errors == [FormError("count", "not text")]
    assert inputs["title"] == ""


def test_values_json_cannot_hold_are_shown_not_raised() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    values = {"rows": cycle, "choice": float("nan"), "body": {1, 2}}
    fields = by_name(form_fields(SCHEMA, values=values))
    assert (fields["rows"].default, fields["choice"].default, fields["body"].default) == (None, "NaN", '"{1, 2}"')


texts = st.text(st.characters(exclude_characters="\r", exclude_categories=()))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
string_lists = st.lists(texts, max_size=4)
schema_values = st.fixed_dictionaries(
    {
        "title": texts,
        "count": st.integers(-(10**30), 10**30),
        "flag": st.booleans(),
        "page": st.fixed_dictionaries(
            {"kind": st.sampled_from(["issue", "epic"])},
            optional={"note": texts.filter(bool), "size": st.integers()},
        ),
        "tags": string_lists,
    },
    optional={
        "body": texts.filter(bool),
        "ratio": st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
        "maybe": st.booleans(),
        "level": st.sampled_from(["low", "high", 3, None]),
        "notes": string_lists,
        "rows": st.lists(st.dictionaries(texts, json_values, max_size=3), max_size=3),
        "meta": st.fixed_dictionaries({"a": st.integers()}, optional={"b": texts.filter(bool)}),
        "choice": texts | st.integers(),
    },
)


@pytest.mark.slow  # hundreds of generated schemas and forms: seconds of pure Python
@settings(max_examples=300, deadline=None)
@given(schema_values)
def test_any_valid_inputs_survive_the_round_trip(values: dict[str, Any]) -> None:
    assert round_trip(SCHEMA, values) == values


hostile_texts = (
    st.text(st.characters(exclude_categories=()))
    | st.sampled_from(["", " ", "\x00", "\ud800", "1" * 400, "1e400", "-0", "NaN", "[" * 5000, '["\\ud800"]', "{}"])
    | st.builds(lambda n: "9" * n, st.integers(0, 5000))
)
form_schemas = st.sampled_from([SCHEMA, None, *(d.get("inputs") for d in DEFINITIONS.values())])


@pytest.mark.slow  # hundreds of generated schemas and forms: seconds of pure Python
@settings(max_examples=400, deadline=None)
@given(form_schemas, st.data())
def test_reading_any_form_never_raises(schema: Any, data: st.DataObject) -> None:
    names = [field.name for field in flatten(form_fields(schema))] + ["~extra", "page.~extra", "meta.~extra"]
    form = data.draw(st.dictionaries(st.sampled_from(names) | st.text(max_size=5), hostile_texts, max_size=12))
    inputs, errors = inputs_from_form(schema, form)
    assert isinstance(inputs, dict)
    assert all(isinstance(error.message, str) and error.field in form for error in errors)


keywords = st.sampled_from(
    ["type", "properties", "items", "enum", "required", "$ref", "default", "description", "maxLength", "minimum"]
    + ["pattern", "additionalProperties", "oneOf", "$defs", "a", "b"]
)
schema_parts = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.sampled_from(["object", "string", "integer", "number", "boolean", "array", "#/$defs/a", "^a$", "a"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keywords, inner, max_size=5),
    max_leaves=40,
)
odd_schemas = schema_parts | st.fixed_dictionaries(
    {"type": st.just("object"), "properties": st.dictionaries(keywords | st.text(max_size=3), schema_parts)},
    optional={"$defs": st.dictionaries(keywords, schema_parts), "required": schema_parts},
)


@pytest.mark.slow  # hundreds of generated schemas and forms: seconds of pure Python
@settings(max_examples=400, deadline=None)
@given(odd_schemas, json_values, st.data())
def test_any_schema_gives_bounded_fields_and_reads_any_form(schema: Any, values: Any, data: st.DataObject) -> None:
    for shown in (form_fields(schema), form_fields(schema, values=values if isinstance(values, dict) else {})):
        fields = list(flatten(shown))
        assert len(fields) <= MAX_FIELDS
        assert all(field.name.count(".") < MAX_DEPTH for field in fields)
    form = data.draw(st.dictionaries(st.sampled_from([f.name for f in fields] or ["x"]), hostile_texts, max_size=8))
    inputs_from_form(schema, form)
