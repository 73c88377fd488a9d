"""Validating and compiling definitions, their digests, and checking render inputs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

import registry.format.inputschema
import registry.rendering.limits
from registry.errors import InvalidDefinition, InvalidInputs, PayloadTooLarge, RegistryError, RenderError
from registry.format.definition import CompiledAgent, compile_definition, definition_digest
from registry.format.safeyaml import parse_yaml
from registry.models import Issue, Message
from registry.rendering import RenderLimits, TemplateEnvironment
from tests.conftest import LibraryRepo, schema_says
from tests.support.executor_fixtures import registry_client

FILE = "chat/agent.yml"
PARTIALS = {
    "_partials/vars.jinja": "{{ x }} {{ y }}",
    "_partials/chain.jinja": "{% include '_partials/vars.jinja' %}{{ z }}",
    "_partials/plain.jinja": "plain",
    "_partials/broken.jinja": "one\ntwo\n{% if %}",
    "_partials/to_missing.jinja": "{% include '_partials/missing.jinja' %}",
    "_partials/dynamic.jinja": "{% include which %}",
}


def _compile(text: str, partials: Mapping[str, str] = PARTIALS) -> CompiledAgent:
    document = parse_yaml(text.encode())
    return compile_definition(document.value, TemplateEnvironment(dict(partials).get), file=FILE, document=document)


def _issues(text: str, partials: Mapping[str, str] = PARTIALS) -> list[Issue]:
    with pytest.raises(InvalidDefinition) as info:
        _compile(text, partials)
    assert info.value.errors
    assert all(issue.file == FILE for issue in info.value.errors)
    return info.value.errors


def _input_issues(agent: CompiledAgent, inputs: Any) -> list[Issue]:
    with pytest.raises(InvalidInputs) as info:
        agent.render(inputs, limits=RenderLimits())
    return info.value.errors


# --- valid definitions -------------------------------------------------------------------


def test_valid_definition_compiles_its_templates_in_file_order() -> None:
    agent = _compile("name: A\nprompt_templates:\n  user: U\n  system: S\n  assistant: A\n")
    assert [role for role, _ in agent.templates] == ["user", "system", "assistant"]
    assert agent.partials == ()
    assert agent.dynamic_includes is False
    assert agent.inputs is None


def test_render_gives_messages_in_file_order_with_model_and_params() -> None:
    agent = _compile(
        "name: A\n"
        "model: {name: m-1, provider: p, params: {temperature: 0.2, custom: yes}}\n"
        'params: {timeout: 30, stop: ["\\n"]}\n'
        "prompt_templates:\n  assistant: Prefill\n  user: 'Hi {{ who }}'\n"
    )
    prompt = agent.render({"who": "Ada"}, limits=RenderLimits())
    assert prompt.messages == (Message("assistant", "Prefill"), Message("user", "Hi Ada"))
    assert prompt.model == {"name": "m-1", "provider": "p", "params": {"temperature": 0.2, "custom": True}}
    assert prompt.params == {"timeout": 30, "stop": ["\n"]}


def test_x_extension_keys_accept_any_value() -> None:
    agent = _compile(
        "name: A\nprompt_templates:\n  user: hi\n"
        "x-rollout: {feature_flag: f, percentage: 25, started: 2024-11-04}\nx-list: [1, 2]\nx-null: null\n"
    )
    assert agent.definition["x-rollout"]["started"] == "2024-11-04"


def test_anchors_under_an_extension_key_can_be_reused() -> None:
    agent = _compile(
        "x-defaults: &defaults {temperature: 0.1}\n"
        "name: A\nmodel:\n  name: m\n  params:\n    <<: *defaults\n    max_tokens: 5\n"
        "prompt_templates:\n  user: hi\n"
    )
    assert agent.definition["model"]["params"] == {"temperature": 0.1, "max_tokens": 5}


def test_variables_a_template_defines_itself_need_no_declaration() -> None:
    agent = _compile(
        "name: A\n"
        "prompt_templates:\n"
        '  user: "{% set a = 1 %}{% for i in range(2) %}{{ a }}{{ i }}{{ loop.index }}{% endfor %}'
        '{% macro m(v) %}{{ v }}{% endmacro %}{{ m(3) }}{{ namespace(b=4).b }}"\n'
        "inputs: {type: object}\n"
    )
    assert agent.render({}, limits=RenderLimits()).messages == (Message("user", "10111234"),)


# --- schema errors ----------------------------------------------------------------------------


EVERYTHING_WRONG = """\
name: ""
description: 5
prompt_template: {}
modle: x
prompt_templates:
  sytem: hi
  user: 3
  assistant: "{% if %}"
model:
  provider: ""
  extra: 1
  params: {temperature: 5, top_k: 0, stop: [""]}
params: {timeout: 0, retries: 3}
inputs:
  type: array
metadata: []
x-anything: {a: 1}
"""


def test_every_problem_is_reported_at_once_with_its_line() -> None:
    issues = _issues(EVERYTHING_WRONG)
    found = {(i.path, i.line) for i in issues}
    assert found == {
        ("/name", 1),
        ("/description", 2),
        ("/prompt_template", 3),
        ("/modle", 4),
        ("/prompt_templates/sytem", 6),
        ("/prompt_templates/user", 7),
        ("/prompt_templates/assistant", 8),
        ("/model", 10),
        ("/model/provider", 10),
        ("/model/extra", 11),
        ("/model/params/temperature", 12),
        ("/model/params/top_k", 12),
        ("/model/params/stop/0", 12),
        ("/params/retries", 13),
        ("/params/timeout", 13),
        ("/inputs/type", 15),
        ("/metadata", 16),
    }
    assert len(issues) == len(found)
    by_path = {i.path: i for i in issues}
    assert by_path["/model"].message == "missing required key 'name'"
    assert by_path["/prompt_templates/assistant"].message.startswith("assistant template: ")
    assert by_path["/model/extra"].hint == "allowed keys: name, provider, params"


@pytest.mark.parametrize(
    ("key", "hint"),
    [("prompt_template", "did you mean 'prompt_templates'?"), ("modle", "did you mean 'model'?")],
)
def test_misspelt_top_level_key_gets_a_did_you_mean_hint(key: str, hint: str) -> None:
    (issue,) = _issues(f"name: A\nprompt_templates:\n  user: hi\n{key}: x\n")
    assert issue.message == f"unknown key {key!r}"
    assert issue.hint == hint
    assert (issue.path, issue.line, issue.column) == (f"/{key}", 4, 1)


def test_unknown_key_far_from_any_gets_the_list_of_allowed_keys() -> None:
    (issue,) = _issues("name: A\nprompt_templates:\n  user: hi\nzzzzzz: 1\n")
    assert issue.hint is not None
    assert "allowed keys: name, description, prompt_templates" in issue.hint
    assert "extension keys start with 'x-'" in issue.hint


def test_extension_key_inside_model_is_unknown() -> None:
    (issue,) = _issues("name: A\nmodel: {name: m, x-note: 1}\nprompt_templates:\n  user: hi\n")
    assert (issue.path, issue.message) == ("/model/x-note", "unknown key 'x-note'")


def test_misspelt_role_gets_a_hint() -> None:
    (issue,) = _issues("name: A\nprompt_templates:\n  sytem: hi\n")
    assert issue.message == "key 'sytem' is not allowed here; expected one of system, user, assistant"
    assert issue.hint == "did you mean 'system'?"
    assert (issue.path, issue.line, issue.column) == ("/prompt_templates/sytem", 3, 3)


def test_empty_prompt_templates_is_rejected() -> None:
    (issue,) = _issues("name: A\nprompt_templates: {}\n")
    assert issue.path == "/prompt_templates"


@pytest.mark.parametrize(("text", "kind"), [("- a\n", "a list"), ("just text\n", "a string"), ("---\n", "null")])
def test_definition_that_is_not_a_mapping_is_rejected(text: str, kind: str) -> None:
    (issue,) = _issues(text)
    assert issue.message == f"a definition is a mapping of keys, not {kind}"


def test_issues_carry_no_position_without_a_document() -> None:
    with pytest.raises(InvalidDefinition) as info:
        compile_definition({"name": "A", "prompt_templates": {"user": 5}}, TemplateEnvironment(dict[str, str]().get))
    (issue,) = info.value.errors
    assert (issue.path, issue.file, issue.line, issue.column) == ("/prompt_templates/user", None, None, None)


def test_each_missing_required_key_is_reported_once() -> None:
    issues = _issues("x-only: 1\n")
    assert sorted(i.message for i in issues) == [
        "missing required key 'name'",
        "missing required key 'prompt_templates'",
    ]


# --- templates, includes and inputs ------------------------------------------------------


def test_template_syntax_error_points_at_the_file_line_inside_a_block_scalar() -> None:
    (issue,) = _issues("name: A\nprompt_templates:\n  system: |\n    ok\n    ok\n    {% if %}\n")
    assert (issue.path, issue.line, issue.column) == ("/prompt_templates/system", 6, None)
    assert issue.message.startswith("system template: Expected an expression")


def test_template_syntax_error_in_a_quoted_scalar_points_at_the_scalars_line() -> None:
    (issue,) = _issues('name: A\nprompt_templates:\n  system: "ok\\n{% if %}"\n')
    assert issue.line == 3


def test_inputs_that_are_not_a_valid_json_schema_are_reported_where_they_are() -> None:
    (issue,) = _issues(
        "name: A\nprompt_templates:\n  user: '{{ q }}'\ninputs:\n  type: object\n  properties:\n    q: {type: 5}\n"
    )
    assert issue.message.startswith("inputs is not a valid JSON Schema: ")
    assert (issue.path, issue.line, issue.column) == ("/inputs/properties/q/type", 7, 15)


def test_inputs_keyword_with_an_invalid_value_is_not_a_valid_json_schema() -> None:
    (issue,) = _issues("name: A\nprompt_templates:\n  user: hi\ninputs:\n  type: object\n  minProperties: -1\n")
    assert issue.message.startswith("inputs is not a valid JSON Schema: ")
    assert issue.path == "/inputs/minProperties"


def test_template_variables_must_be_declared_in_inputs_including_through_partials() -> None:
    issues = _issues(
        "name: A\n"
        "prompt_templates:\n"
        "  system: |\n"
        "    {{ q }}\n"
        "    {% include '_partials/chain.jinja' %}\n"
        "  user: '{{ w }}'\n"
        "inputs:\n  type: object\n  properties:\n    q: {type: string}\n"
    )
    assert [(i.path, i.message, i.hint) for i in issues] == [
        (
            "/prompt_templates/system",
            "system template uses 'x', which inputs does not declare",
            "add 'x' to inputs.properties",
        ),
        (
            "/prompt_templates/system",
            "system template uses 'y', which inputs does not declare",
            "add 'y' to inputs.properties",
        ),
        (
            "/prompt_templates/system",
            "system template uses 'z', which inputs does not declare",
            "add 'z' to inputs.properties",
        ),
        (
            "/prompt_templates/user",
            "user template uses 'w', which inputs does not declare",
            "add 'w' to inputs.properties",
        ),
    ]
    assert [i.line for i in issues] == [3, 3, 3, 6]


def test_optional_variable_used_under_is_defined_must_still_be_declared() -> None:
    (issue,) = _issues(
        "name: A\nprompt_templates:\n  user: '{% if extra is defined %}{{ extra }}{% endif %}'\ninputs: {type: object}\n"
    )
    assert "'extra'" in issue.message


def test_without_inputs_any_variable_is_allowed_until_render() -> None:
    agent = _compile("name: A\nprompt_templates:\n  user: '{{ anything }}'\n")
    assert agent.render({"anything": 1, "unused": 2}, limits=RenderLimits()).messages == (Message("user", "1"),)
    with pytest.raises(RenderError):
        agent.render({}, limits=RenderLimits())


@pytest.mark.parametrize(
    ("include", "fragment"),
    [
        ("_partials/missing.jinja", "template '_partials/missing.jinja' does not exist in this release"),
        ("_partials/to_missing.jinja", "template '_partials/missing.jinja' does not exist in this release"),
        ("_partials/broken.jinja", "included template '_partials/broken.jinja' (line 3): Expected an expression"),
        ("../outside.jinja", "'../outside.jinja' is not a valid template name"),
    ],
)
def test_bad_include_is_reported_with_the_template_path(include: str, fragment: str) -> None:
    (issue,) = _issues(f"name: A\nprompt_templates:\n  system: ok\n  user: |\n    {{% include '{include}' %}}\n")
    assert issue.path == "/prompt_templates/user"
    assert issue.message.startswith("user template: ")
    assert fragment in issue.message
    assert issue.line == 4


def test_bad_imports_are_reported_too() -> None:
    issues = _issues(
        "name: A\nprompt_templates:\n  user: \"{% import '_partials/nope.jinja' as n %}"
        "{% from '_partials/broken.jinja' import m %}\"\n"
    )
    assert len(issues) == 2
    assert {i.path for i in issues} == {"/prompt_templates/user"}


def test_partials_reached_by_literal_names_are_listed() -> None:
    agent = _compile("name: A\nprompt_templates:\n  user: \"{% include '_partials/chain.jinja' %}\"\n")
    assert agent.partials == ("_partials/chain.jinja", "_partials/vars.jinja")
    assert agent.dynamic_includes is False


def test_partial_that_includes_itself_is_followed_once() -> None:
    partials = {"_partials/loop.jinja": "{% if false %}{% include '_partials/loop.jinja' %}{% endif %}x"}
    agent = _compile("name: A\nprompt_templates:\n  user: \"{% include '_partials/loop.jinja' %}\"\n", partials)
    assert agent.partials == ("_partials/loop.jinja",)


@pytest.mark.parametrize(
    "template",
    [
        "{% include which %}",
        "{% include ['_partials/plain.jinja', which] %}",
        "{% include '_partials/dynamic.jinja' %}",
        "{% import which as w %}",
    ],
)
def test_include_with_a_computed_name_is_flagged_dynamic(template: str) -> None:
    agent = _compile(f'name: A\nprompt_templates:\n  user: "{template}"\n')
    assert agent.dynamic_includes is True


def test_literal_names_next_to_a_computed_one_are_still_followed() -> None:
    agent = _compile("name: A\nprompt_templates:\n  user: \"{% include ['_partials/plain.jinja', which] %}\"\n")
    assert agent.partials == ("_partials/plain.jinja",)


# --- digests ---------------------------------------------------------------------------------


def test_digest_is_a_stable_sha256() -> None:
    digest = definition_digest(b"name: A\n", {"_partials/p.jinja": b"P"})
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert definition_digest(b"name: A\n", {"_partials/p.jinja": b"P"}) == digest


def test_digest_changes_with_definition_bytes() -> None:
    assert definition_digest(b"name: A\n", {}) != definition_digest(b"name: B\n", {})


def test_digest_changes_with_partial_bytes_and_names() -> None:
    base = definition_digest(b"d", {"_partials/p.jinja": b"P"})
    assert definition_digest(b"d", {"_partials/p.jinja": b"Q"}) != base
    assert definition_digest(b"d", {"_partials/q.jinja": b"P"}) != base
    assert definition_digest(b"d", {}) != base
    assert definition_digest(b"d", {"a": b"bc"}) != definition_digest(b"d", {"ab": b"c"})


def test_digest_ignores_the_order_partials_are_given_in() -> None:
    assert definition_digest(b"d", {"a": b"1", "b": b"2"}) == definition_digest(b"d", {"b": b"2", "a": b"1"})


def test_tree_id_changes_the_digest_only_when_given() -> None:
    without = definition_digest(b"d", {"p": b"P"})
    assert definition_digest(b"d", {"p": b"P"}, tree_content_id=None) == without
    with_tree = definition_digest(b"d", {"p": b"P"}, tree_content_id="abc123")
    assert with_tree != without
    assert definition_digest(b"d", {"p": b"P"}, tree_content_id="abc123") == with_tree
    assert definition_digest(b"d", {"p": b"P"}, tree_content_id="def456") != with_tree


# --- render inputs -------------------------------------------------------------------------------


WITH_INPUTS = """\
name: A
prompt_templates:
  user: "{{ name }}|{{ age }}|{{ tone }}|{{ tags | join(',') }}|{{ opts.k | default('none') }}"
inputs:
  type: object
  required: [name, age]
  additionalProperties: false
  properties:
    name: {type: string, maxLength: 10}
    age: {type: integer}
    tone: {type: string, default: friendly}
    tags: {type: array, items: {type: string}, default: []}
    opts:
      type: object
      default: {}
      properties:
        k: {type: string, default: nested}
"""


def _with_inputs() -> CompiledAgent:
    return _compile(WITH_INPUTS)


def test_declared_input_defaults_are_applied_and_given_values_win() -> None:
    agent = _with_inputs()
    (message,) = agent.render({"name": "n", "age": 3}, limits=RenderLimits()).messages
    assert message.content == "n|3|friendly||none"
    (message,) = agent.render(
        {"name": "n", "age": 3, "tone": "dry", "tags": ["a", "b"], "opts": {"k": "v"}}, limits=RenderLimits()
    ).messages
    assert message.content == "n|3|dry|a,b|v"


def test_render_does_not_change_the_callers_inputs() -> None:
    inputs: dict[str, Any] = {"name": "n", "age": 3}
    _with_inputs().render(inputs, limits=RenderLimits())
    assert inputs == {"name": "n", "age": 3}


def test_missing_required_input_is_reported_at_its_path() -> None:
    (issue,) = _input_issues(_with_inputs(), {"age": 3})
    assert (issue.path, issue.message) == ("/name", "missing required input 'name'")


def test_extra_input_is_rejected_when_additional_properties_is_false() -> None:
    (issue,) = _input_issues(_with_inputs(), {"name": "n", "age": 3, "nmae": "x"})
    assert (issue.path, issue.message) == ("/nmae", "unexpected input 'nmae'")


def test_input_of_the_wrong_type_is_reported_at_its_path() -> None:
    (issue,) = _input_issues(_with_inputs(), {"name": "n", "age": "three"})
    assert (issue.path, issue.message) == ("/age", schema_says({"type": "integer"}, "three"))


def test_nested_input_error_has_its_full_path() -> None:
    (issue,) = _input_issues(_with_inputs(), {"name": "n", "age": 3, "tags": ["ok", 5]})
    assert issue.path == "/tags/1"


def test_every_input_problem_is_reported_at_once_sorted_by_path() -> None:
    with pytest.raises(InvalidInputs) as info:
        _with_inputs().render({"age": "x", "bogus": 1, "tone": 5}, limits=RenderLimits())
    assert [i.path for i in info.value.errors] == ["/age", "/bogus", "/name", "/tone"]
    assert info.value.detail == f"/age: {schema_says({'type': 'integer'}, 'x')}, and 3 more problems"


def test_an_input_error_says_its_one_problem_in_words() -> None:
    with pytest.raises(InvalidInputs) as info:
        _with_inputs().render({"age": 3}, limits=RenderLimits())
    assert str(info.value) == info.value.detail == "missing required input 'name'"
    with pytest.raises(InvalidInputs) as two:
        _with_inputs().render({}, limits=RenderLimits())
    assert two.value.detail == "missing required input 'age', and 1 more problem"


def test_an_invalid_definition_says_its_first_problem_where_it_is_and_how_many_more() -> None:
    with pytest.raises(InvalidDefinition) as one:
        _compile("name: A\nprompt_templates:\n  user: hi\nmodle: x\n")
    assert str(one.value) == one.value.detail == "chat/agent.yml:4:1: unknown key 'modle'"
    with pytest.raises(InvalidDefinition) as several:
        _compile(EVERYTHING_WRONG)
    assert several.value.detail.startswith("chat/agent.yml:1:")
    assert several.value.detail.endswith(f", and {len(several.value.errors) - 1} more problems")
    with pytest.raises(InvalidDefinition) as unplaced:
        compile_definition({"name": "A", "prompt_templates": {"user": 5}}, TemplateEnvironment(dict[str, str]().get))
    assert unplaced.value.detail == f"/prompt_templates/user: {schema_says({'type': 'string'}, 5)}"


def test_inputs_that_are_not_an_object_are_rejected() -> None:
    (issue,) = _input_issues(_with_inputs(), ["name"])
    assert issue.message == "expected an object, got a list"


@pytest.mark.parametrize(
    "inputs",
    [
        {"name": "x" * 100_000, "age": 3},
        {"name": ["x" * 100_000], "age": "z" * 100_000},
        {"name": "n", "age": 3, "tone": {"k": "v" * 100_000}},
        {"name": "n", "age": 3, "tags": ["t" * 100_000, 5]},
    ],
)
def test_huge_input_strings_give_short_messages(inputs: dict[str, Any]) -> None:
    issues = _input_issues(_with_inputs(), inputs)
    for issue in issues:
        assert len(issue.message) < 400
        assert len(json.dumps(issue.as_dict())) < 400


def test_huge_unexpected_input_name_gives_a_short_message() -> None:
    (issue,) = _input_issues(_with_inputs(), {"name": "n", "age": 3, "k" * 100_000: 1})
    assert len(issue.message) < 400


def test_huge_unexpected_input_name_gives_a_short_issue() -> None:
    (issue,) = _input_issues(_with_inputs(), {"name": "n", "age": 3, "k" * 100_000: 1})
    assert len(json.dumps(issue.as_dict())) < 400


def test_each_missing_required_input_is_reported_at_its_own_path() -> None:
    issues = _input_issues(_with_inputs(), {})
    assert [(i.path, i.message) for i in issues] == [
        ("/age", "missing required input 'age'"),
        ("/name", "missing required input 'name'"),
    ]


# --- the input budget: hostile bodies --------------------------------------------------------

PASSAGES = """\
name: Passages
prompt_templates:
  user: "{{ question }}{% for p in passages %} [{{ p.title }}] {{ p.text }}{% endfor %}"
inputs:
  type: object
  required: [question, passages]
  additionalProperties: false
  properties:
    question: {type: string}
    passages:
      type: array
      items:
        type: object
        required: [title, text]
        properties: {title: {type: string}, text: {type: string, maxLength: 8000}}
"""
UNCHECKED = 'name: Unchecked\nprompt_templates:\n  user: "{{ question }}"\n'  # no inputs schema
VALUES_OVER = "inputs hold more than the limit of 10,000 values (each array, object, string, number, boolean or null)"
DEPTH_OVER = "inputs are nested deeper than the limit of 48 levels"
TEXT_OVER = "inputs hold more than the limit of 1,048,576 characters of text (strings and keys)"


def _nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


# Each as large as a 1 MiB request body allows (the huge string, larger: a
# local render has no body); before the budget the wide bodies cost 0.5-0.8 s
# of jsonschema each, and the deep ones were accepted by agents without a schema.
HOSTILE = {
    "wide": (
        {"question": "q", "passages": [{"title": "t", "text": "abcdefg"}] * 33_822 + [{"title": "t", "text": 1}]},
        InvalidInputs,
        f"/passages: {VALUES_OVER}",
    ),
    "huge-string": ({"question": "x" * 2_000_000, "passages": []}, PayloadTooLarge, TEXT_OVER),
    "deep": ({"question": "q", "passages": _nested(900)}, InvalidInputs, f"/passages: {DEPTH_OVER}"),
    "wide-and-deep": (
        {"question": "q", "passages": [_nested(40)] * 13_000},
        InvalidInputs,
        f"/passages: {VALUES_OVER}",
    ),
}


@pytest.mark.parametrize("definition", [PASSAGES, UNCHECKED], ids=["with-schema", "without-schema"])
@pytest.mark.parametrize("body", HOSTILE, ids=list(HOSTILE))
def test_hostile_inputs_are_refused_by_their_budget(definition: str, body: str) -> None:
    inputs, error_class, detail = HOSTILE[body]
    with pytest.raises(RegistryError) as info:
        _compile(definition).render(inputs, limits=RenderLimits())
    assert type(info.value) is error_class
    assert info.value.slug == ("payload-too-large" if error_class is PayloadTooLarge else "invalid-inputs")
    assert info.value.detail == detail
    if error_class is InvalidInputs:
        assert isinstance(info.value, InvalidInputs)
        assert [(i.path, i.message) for i in info.value.errors] == [tuple(detail.split(": ", 1))]


def test_one_huge_string_a_request_can_carry_is_refused_by_the_schema_in_a_few_words() -> None:
    (issue,) = _input_issues(
        _compile(PASSAGES), {"question": "q", "passages": [{"title": "t", "text": "x" * 1_000_000}]}
    )
    said = schema_says({"maxLength": 10}, "x" * 1_000_000)[len(repr("x" * 1_000_000)) :]  # its words after the quote
    assert issue.path == "/passages/0/text" and issue.message.endswith(said) and len(issue.message) < 400


def test_large_but_ordinary_inputs_render() -> None:
    passages = [{"title": f"t{i}", "text": "a passage"} for i in range(3000)]  # 9,001 values
    (message,) = _compile(PASSAGES).render({"question": "q", "passages": passages}, limits=RenderLimits()).messages
    assert message.content.startswith("q [t0] a passage [t1]")


def test_the_input_budget_comes_from_the_render_limits() -> None:
    agent = _compile(PASSAGES)
    inputs = {"question": "q", "passages": [{"title": "t", "text": "x"}]}  # 5 values, 28 characters
    assert agent.render(inputs, limits=RenderLimits(max_input_values=5, max_input_chars=28)).messages
    with pytest.raises(InvalidInputs, match="more than the limit of 4 values"):
        agent.render(inputs, limits=RenderLimits(max_input_values=4))
    with pytest.raises(PayloadTooLarge, match="more than the limit of 27 characters"):
        agent.render(inputs, limits=RenderLimits(max_input_chars=27))


class _Clock:
    """A monotonic clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 1000.0
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock(step=0.01)
    for module in (registry.format.inputschema, registry.rendering.limits):
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


COUNTED = """\
name: Counted
prompt_templates:
  user: "{% for n in ns %}{{ n }},{% endfor %}"
inputs:
  type: object
  properties:
    ns: {type: array, items: {type: integer, multipleOf: 1}}
"""


def test_validating_and_rendering_share_one_clock(clock: _Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _compile(COUNTED)
    inputs = {"ns": list(range(20))}
    limits = RenderLimits(max_seconds=2.0)
    assert agent.render(inputs, limits=limits).messages[0].content.startswith("0,1,2,")
    assert agent.inputs is not None
    validate = agent.inputs.issues

    def slow_validation(*args: Any, **kwargs: Any) -> Any:
        issues = validate(*args, **kwargs)
        clock.now += 1.5  # within 2 s, but the render's 20 loop steps then take the clock past them
        return issues

    monkeypatch.setattr(agent.inputs, "issues", slow_validation)
    with pytest.raises(RenderError, match="longer than 2.0 seconds"):
        agent.render(inputs, limits=limits)


def test_validation_past_the_render_clock_is_an_input_problem(clock: _Clock) -> None:
    agent = _compile(COUNTED)
    assert agent.inputs is not None and not agent.inputs.has_fast_path  # multipleOf: jsonschema alone
    with pytest.raises(InvalidInputs) as info:
        agent.render({"ns": [*range(5000), "x"]}, limits=RenderLimits(max_seconds=1.0))
    assert (
        info.value.detail == "validating the inputs took longer than the limit of 1.0 seconds (shared with rendering)"
    )


TOOLS_IN_THE_PROMPT = """\
name: Refunds
type: tool_calling
model: {name: test-model}
tools:
  - name: refund
    description: Refunds an order.
    parameters: {type: object, properties: {order: {type: string}}}
    x-requires-approval: true
    x-owner: payments
prompt_templates:
  system: "Tools: {{ tools | tojson }}"
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""


def test_templates_get_the_tools_without_their_x_keys_on_the_server_and_in_the_client(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"shop/refunds.yml": TOOLS_IN_THE_PROMPT})
    with registry_client(repo.path) as client:
        agent = client.get("shop", "refunds", release="v1.0.0")
        local = agent.render({"question": "q"})
        served = client.render("shop", "refunds", {"question": "q"}, release="v1.0.0")
    assert local.messages == served.messages
    system = local.messages[0].content
    assert '"name": "refund"' in system and "x-" not in system
    tool = agent.definition["tools"][0]
    assert tool["x-requires-approval"] is True and tool["x-owner"] == "payments"  # served as written
