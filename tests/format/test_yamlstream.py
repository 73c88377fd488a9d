"""Reading a long YAML file piece by piece: the same values and verdicts as
parse_yaml, positions from the top of the file, anchors, limits per piece,
and problems of the whole file."""

from __future__ import annotations

import io
from typing import Any

import pytest

from registry.format.safeyaml import Position, YamlError, YamlLimits, parse_yaml
from registry.format.yamlstream import Piece, StreamLimits, stream_pieces


def _pieces(text: str, *, streamed: str = "cases", limits: StreamLimits = StreamLimits()) -> list[Piece]:
    return list(stream_pieces(io.BytesIO(text.encode()), streamed=streamed, limits=limits))


def _streamed_value(text: str) -> tuple[dict[str, Any], list[str]]:
    """The top-level mapping as the pieces give it, and every problem found."""
    value: dict[str, Any] = {}
    problems: list[str] = []
    try:
        for piece in stream_pieces(io.BytesIO(text.encode()), streamed="none of them"):
            problems += [issue.message for issue in piece.issues]
            if piece.document is not None:
                value[str(piece.path[0])] = piece.document.value
    except YamlError as exc:
        problems += [issue.message for issue in exc.issues]
    return value, problems


# Each read by parse_yaml and by the pieces: the same value, or a problem from both.
SAME_AS_PARSE_YAML = [
    "a: 1\nb: [1, 2.5, true, null, ~, '3', 2001-12-14, 0x1F, 1_000, -.5e3]\n",
    "base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3, z: 4}\n",
    "base: &b {x: 1}\nmore: &m {x: 2, w: 5}\nc: {<<: [*b, *m], q: 1}\n",
    "k: &k key\nm: {*k : v}\n",
    "a: !!str 5\nb: !!int '7'\nc: !!float '1'\n",
    "a: |\n  literal\n  text\nb: >\n  folded\n  text\n",
    "a: 123456789012345678901234567890\n",
    "a: {b: [{c: [1, {d: e}]}]}\n",
    "a: {x: 1, x: 2}\n",
    "a: {1: x}\n",
    "a: {? [1, 2] : v}\n",
    "a: !!binary aGVsbG8=\n",
    "a: !custom x\n",
    "a: !!set {x}\n",
    "a: !!omap [x: 1]\n",
    "a: .inf\n",
    "a: .nan\n",
    "a: &r [*r]\n",
    "a: *nope\n",
    "a: {<<: 5}\n",
    "a: !!int x\n",
    "a: " + "9" * 5000 + "\n",
]


@pytest.mark.parametrize("text", SAME_AS_PARSE_YAML)
def test_pieces_read_what_parse_yaml_reads_and_refuse_what_it_refuses(text: str) -> None:
    value, problems = _streamed_value(text)
    try:
        expected = parse_yaml(text.encode()).value
    except YamlError:
        assert problems, f"parse_yaml refuses {text!r}, the pieces do not"
        return
    assert problems == []
    assert value == expected


def test_a_billion_laughs_is_refused_in_the_piece_that_expands_it() -> None:
    laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for name, previous in zip("bcdefg", "abcdef", strict=True):
        laughs += f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 10) + "]\n"
    pieces = _pieces(laughs + "h: [*g, *g]\n")
    refused = [piece for piece in pieces if piece.issues]
    assert refused[0].path == ("e",)  # 10 ** 5 laughs, and the lists holding them
    assert "expands to more than 100000 values (aliases included)" in refused[0].issues[0].message
    # What aliases a refused value is refused too, once, not once per alias.
    assert [piece.path for piece in refused] == [("e",), ("f",), ("g",), ("h",)]
    assert [issue.message for issue in refused[1].issues] == ["alias *e names a value that could not be read"]
    assert [issue.message for issue in refused[3].issues] == ["alias *g names a value that could not be read"]


def test_items_of_the_streamed_key_are_pieces_of_their_own_with_positions_from_the_top() -> None:
    text = "agent: a/b\ncases:\n  - id: one\n    inputs: {q: x}\n  - {id: two}\nafter: 1\n"
    pieces = _pieces(text)
    assert [piece.path for piece in pieces] == [("agent",), ("cases",), ("cases", 0), ("cases", 1), ("after",)]
    marker = pieces[1]
    assert marker.items and marker.document is None and marker.start == Position(2, 1)
    first = pieces[2].document
    assert first is not None and first.value == {"id": "one", "inputs": {"q": "x"}}
    assert first.position(("cases", 0, "inputs", "q")) == Position(4, 17)
    assert first.position(("cases", 0, "inputs"), key=True) == Position(4, 5)
    assert pieces[0].start == Position(1, 1)


def test_an_item_may_alias_the_header_but_not_another_item() -> None:
    text = "base: &base {q: shared}\ncases:\n  - {id: one, inputs: *base, x: &mine 1}\n  - {id: two, y: *mine}\n"
    first, second = _pieces(text)[2:]
    assert first.document is not None and first.document.value["inputs"] == {"q": "shared"}
    assert second.document is None
    assert second.issues[0].message == "alias *mine names no anchor before it in this part of the file"
    assert second.issues[0].line == 4


def test_a_problem_in_one_item_leaves_the_next_one_readable() -> None:
    text = "cases:\n  - {id: one, id: again}\n  - {id: two, deep: " + "[" * 80 + "]" * 80 + "}\n  - {id: three}\n"
    bad, deep, good = _pieces(text)[1:]
    assert bad.issues[0].rule == "duplicate-key" and (bad.issues[0].line, bad.issues[0].column) == (2, 15)
    assert deep.issues[0].message == "nesting is deeper than 64 levels"
    assert good.document is not None and good.document.value == {"id": "three"}


def test_each_piece_is_held_to_its_own_limits() -> None:
    limits = StreamLimits(piece=YamlLimits(max_bytes=200, max_events=30))
    long_text = "cases:\n  - {id: one, text: '" + "x" * 300 + "'}\n  - {id: two, list: [" + "1, " * 40 + "1]}\n"
    too_long, too_many = _pieces(long_text, limits=limits)[1:]
    assert too_long.issues[0].message == "this value is more than 200 characters long"
    assert too_many.issues[0].message == "this value has more than 30 YAML events"


def test_the_top_level_keys_are_checked_as_in_a_document() -> None:
    pieces = _pieces("a: 1\n2: x\na: again\n[1]: y\n")
    messages = [issue.message for piece in pieces for issue in piece.issues]
    assert messages == [
        "mapping key '2' is not a string",
        "duplicate key 'a' (first defined on line 1)",
        "mapping key 'a collection' is not a string",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "file is empty; it is a YAML mapping of keys"),
        ("- a list\n", "the file is not a mapping of keys"),
        ("a: 1\n---\nb: 2\n", "the file holds more than one YAML document; give it one"),
        ("a: [unclosed\n", "YAML syntax error: "),
    ],
)
def test_a_problem_with_the_whole_file_ends_the_stream(text: str, message: str) -> None:
    with pytest.raises(YamlError) as info:
        _pieces(text)
    assert info.value.issues[0].message.startswith(message)


def test_a_syntax_error_after_good_pieces_ends_the_stream_where_it_is() -> None:
    stream = stream_pieces(io.BytesIO(b"cases:\n  - {id: one}\n  - {id: [two\n"), streamed="cases")
    assert next(stream).items
    assert next(stream).document is not None
    with pytest.raises(YamlError) as info:
        next(stream)
    assert info.value.issues[0].line == 4


def test_a_file_over_its_size_limit_is_refused_as_it_is_read() -> None:
    text = "cases:\n" + "  - {id: c}\n" * 10_000
    with pytest.raises(YamlError) as info:
        _pieces(text, limits=StreamLimits(max_bytes=50_000))
    assert info.value.issues[0].rule == "file-size"
