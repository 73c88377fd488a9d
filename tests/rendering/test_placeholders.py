"""Placeholders after Jinja: the grammar, checked against a plain reference
reading over generated texts and a table of tricky ones; the names a
template's source writes; filling them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.errors import RenderError
from registry.models import Message, Placeholder, Prompt
from registry.rendering import fill_placeholders, find_placeholders, placeholder_text, written_names

# --- a reference reading, slow and plain ---------------------------------------------------

_CANDIDATE = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


def _reference(text: str) -> list[tuple[str, int, int]]:
    """The grammar read character by character: every candidate with the
    braces open around it, then those whose braces all stay unclosed."""
    candidates = {m.start(): m for m in _CANDIDATE.finditer(text)}
    stack: list[int] = []
    closed: set[int] = set()
    seen: list[tuple[str, int, int, tuple[int, ...]]] = []
    index = 0
    in_string = False
    while index < len(text):
        char = text[index]
        if index in candidates:
            match = candidates[index]
            seen.append((match.group(1), match.start(), match.end(), tuple(stack)))
            index = match.end()
        elif in_string:
            in_string = char != '"'
            # A backslash escapes a quote or a backslash: it matters for where the string ends.
            index += 2 if char == "\\" and text[index + 1 : index + 2] in ('"', "\\") else 1
        else:
            if char == "{":
                stack.append(index)
            elif char == "}" and stack:
                closed.add(stack.pop())
            elif char == '"' and stack:
                in_string = True
            index += 1
    return [(name, start, end) for name, start, end, around in seen if not closed & set(around)]


def _found(text: str, **options: Any) -> list[tuple[str, int, int]]:
    return [(p.name, p.start, p.end) for p in find_placeholders(text, **options)]


def _names(text: str) -> list[str]:
    return [p.name for p in find_placeholders(text)]


FRAGMENTS = [
    "{",
    "}",
    '"',
    "\\",
    "a",
    "_b1",
    " ",
    ":",
    "é",
    "\n",
    "{question}",
    "{{",
    "}}",
    '{"a": 1}',
    "{0}",
    "{ x }",
    "{agent_scratchpad}",
    "𝔘",
]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join) | st.text(
    st.sampled_from(list('{}"\\ab_1 é')), max_size=60
)


@settings(max_examples=1500, deadline=None)
@given(text=texts)
def test_finds_exactly_what_the_grammar_says(text: str) -> None:
    assert _found(text) == _reference(text)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_each_placeholder_is_its_name_in_braces_where_it_says(text: str) -> None:
    for found in find_placeholders(text, message=3):
        assert text[found.start : found.end] == "{" + found.name + "}"
        assert found.message == 3


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.sampled_from(list('{}"\\ab é')), max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(value=st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=4), ascii_only=st.booleans())
def test_json_text_of_an_object_never_holds_a_placeholder(value: dict[str, Any], ascii_only: bool) -> None:
    assert find_placeholders(json.dumps(value, ensure_ascii=ascii_only)) == ()
    assert find_placeholders(f"Reply as {json.dumps(value, indent=2)} and nothing else.") == ()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("Question: {question}", ["question"]),
        ("{agent_scratchpad}\nThought:", ["agent_scratchpad"]),
        ("{a}{b} x{c}y {_d9}", ["a", "b", "c", "_d9"]),
        # JSON examples and code
        ('{"a": 1}', []),
        ('Reply with {"findings": [], "question": "{question}"}', []),
        ('{"a": "}", "b": "{x}"}', []),
        ('{"a": "\\"}", "b": "{x}"} then {y}', ["y"]),
        ("function f() { return {x}; }", []),
        ("if (a) {\n  {prefix}\n}", []),
        ("{ x } {0} {1a} {a.b} {a-b} {} {名前} { question}", []),
        # Jinja's delimiters left in the output
        ("{{question}} {{ question }} {{{question}}} {{question} {question}}", []),
        ("{{ '{' }} {%raw%}", []),
        # unmatched braces enclose nothing; quotes outside braces are prose
        ("Use { to open a block. {question}", ["question"]),
        ("} {question} {", ["question"]),
        ('He said "{question}"', ["question"]),
        ('{ "never closed {x}', ["x"]),
        ("\\{question}", ["question"]),
        # unicode around placeholders
        ("¿{pregunta}? – «{question}» 𝔘{x}", ["pregunta", "question", "x"]),
    ],
)
def test_tricky_texts(text: str, names: list[str]) -> None:
    assert _names(text) == names
    assert _found(text) == _reference(text)


def test_offsets_are_in_characters_not_bytes() -> None:
    [found] = find_placeholders("𝔘é {question}")
    assert (found.start, found.end) == (3, 13)


def test_names_keep_only_the_given_placeholders_and_their_braces_still_pair() -> None:
    text = '{x} {"k": {y}} {z}'
    assert _found(text, names={"x", "y"}) == [("x", 0, 3)]
    assert _found(text, names=()) == []
    # A placeholder left out is still a pair of braces, not an open one.
    assert _found("{skip} {kept} }", names={"kept"}) == [("kept", 7, 13)]


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("{" * 1_000_000, 0),
        ("}" * 1_000_000, 0),
        ("{a" * 500_000, 0),
        ("{a}" * 300_000, 300_000),
        ("{" + "a" * 1_000_000, 0),
        ('{"' * 400_000, 0),
        ('{"' + "\\" * 1_000_000 + '"}', 0),
        ("{" + '\\"' * 400_000 + "{x}", 1),
        ("{{a}}" * 200_000, 0),
        ("{ " * 300_000 + "{x}" + " }" * 300_000, 0),
        ("{ }" * 200_000 + "{ " * 200_000 + "{x}", 1),
    ],
    ids=[
        "opens",
        "closes",
        "unclosed-names",
        "placeholders",
        "long-name",
        "quotes",
        "escapes",
        "escaped-quotes",
        "doubled",
        "deep-closed",
        "deep-open",
    ],
)
def test_megabyte_texts_are_read_in_one_pass(text: str, count: int) -> None:
    assert len(find_placeholders(text)) == count


# --- what a template's source writes --------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("Question: {question}\n{% for t in tools %}{{ t.name }}{% endfor %}", {"question"}),
        ("{{ '{x}' }} {# {y} #} {% set z = '{z}' %}{{ \"{w}\" }}", set()),
        ("{% raw %}{x}{% endraw %} {%- if a %}{y}{% endif %}", {"x", "y"}),
        ('{"json": "{x}"} {% set d = {"k": "}"} %} {after}', {"after"}),
    ],
)
def test_written_names_are_the_placeholders_of_the_template_text(source: str, names: set[str]) -> None:
    assert written_names(source) == names


# --- filling -------------------------------------------------------------------------------


def _prompt(*contents: str) -> Prompt:
    messages = tuple(Message("user", content) for content in contents)
    found = tuple(p for index, text in enumerate(contents) for p in find_placeholders(text, message=index))
    return Prompt(messages=messages, placeholders=found)


def test_filling_replaces_the_named_and_moves_the_rest() -> None:
    prompt = _prompt("{a} and {b} then {a}", "{b}!", "none")
    filled = fill_placeholders(prompt, {"a": "long é value"})
    assert [m.content for m in filled.messages] == ["long é value and {b} then long é value", "{b}!", "none"]
    assert filled.placeholders == (Placeholder(0, "b", 17, 20), Placeholder(1, "b", 0, 3))
    assert fill_placeholders(filled, {"b": ""}).messages[0].content == "long é value and  then long é value"


def test_a_value_is_written_as_it_is_and_never_read_for_placeholders() -> None:
    filled = fill_placeholders(_prompt("Q: {question} {other}"), {"question": "why {other}? {{x}}"})
    assert filled.messages[0].content == "Q: why {other}? {{x}} {other}"
    [left] = filled.placeholders
    assert filled.messages[0].content[left.start : left.end] == "{other}"
    assert left.start == len("Q: why {other}? {{x}} ")


@settings(max_examples=300, deadline=None)
@given(text=texts, value=st.text(max_size=10), which=st.sampled_from(["question", "a", "agent_scratchpad"]))
def test_after_filling_every_placeholder_left_is_where_it_says(text: str, value: str, which: str) -> None:
    prompt = _prompt(text)
    filled = fill_placeholders(prompt, {which: value})
    expected = text
    for found in reversed(prompt.placeholders):
        if found.name == which:
            expected = expected[: found.start] + value + expected[found.end :]
    assert filled.messages[0].content == expected
    assert [p.name for p in filled.placeholders] == [p.name for p in prompt.placeholders if p.name != which]
    for left in filled.placeholders:
        assert expected[left.start : left.end] == "{" + left.name + "}"


def test_a_fill_past_the_output_limit_is_refused_before_it_is_built() -> None:
    prompt = _prompt("{x}" * 1000)
    with pytest.raises(RenderError, match="exceeds 1048576 bytes once its placeholders are filled"):
        fill_placeholders(prompt, {"x": "é" * 1000}, max_bytes=1024 * 1024)
    assert len(fill_placeholders(prompt, {"x": "é" * 500}, max_bytes=1024 * 1024).messages[0].content) == 500_000


def test_an_input_value_is_text_as_it_is_or_compact_json() -> None:
    assert placeholder_text("a {b}") == "a {b}"
    assert placeholder_text({"k": [1, "é"]}) == '{"k":[1,"é"]}'
    assert placeholder_text(None) == "null"
    assert placeholder_text(3) == "3"
