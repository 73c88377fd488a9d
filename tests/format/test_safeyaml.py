"""Reading untrusted YAML: positions, aliases, limits and JSON-only values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.errors import ConfigurationError
from registry.format.safeyaml import Position, YamlDocument, YamlError, YamlLimits, parse_yaml, read_yaml_file
from registry.models import Issue, json_pointer


def _issues(data: bytes, *, limits: YamlLimits = YamlLimits()) -> list[Issue]:
    with pytest.raises(YamlError) as info:
        parse_yaml(data, limits=limits)
    assert info.value.issues, "a YamlError always carries at least one issue"
    return info.value.issues


def _only_issue(data: bytes, *, limits: YamlLimits = YamlLimits()) -> Issue:
    issues = _issues(data, limits=limits)
    assert len(issues) == 1, issues
    return issues[0]


# --- values and positions -------------------------------------------------------


def test_mapping_is_read_into_plain_json_values() -> None:
    document = parse_yaml(b"name: x\ncount: 3\nratio: 0.5\nflag: true\nnothing: null\nlist: [a, 1]\n")
    assert document.value == {
        "name": "x",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "nothing": None,
        "list": ["a", 1],
    }
    assert json.loads(json.dumps(document.value)) == document.value


def test_positions_of_values_and_keys_are_one_based_lines_and_columns() -> None:
    document = parse_yaml(b"name: x\nlist:\n  - a\n  - b: 1\n")
    assert document.values[()] == Position(line=1, column=1)
    assert document.values[("name",)] == Position(line=1, column=7)
    assert document.keys[("name",)] == Position(line=1, column=1)
    assert document.keys[("list",)] == Position(line=2, column=1)
    assert document.values[("list", 0)] == Position(line=3, column=5)
    assert document.values[("list", 1)] == Position(line=4, column=5)
    assert document.keys[("list", 1, "b")] == Position(line=4, column=5)
    assert document.values[("list", 1, "b")] == Position(line=4, column=8)


def test_literal_block_scalars_are_flagged_and_start_at_their_indicator() -> None:
    document = parse_yaml(b'plain: x\nliteral: |\n  a\n  b\nfolded: >\n  c\nquoted: "d"\n')
    assert document.values[("literal",)] == Position(line=2, column=10, block=True)
    # folded scalars join lines, so their text lines do not map to file lines
    assert document.values[("folded",)] == Position(line=5, column=9, block=False)
    assert document.values[("plain",)].block is False
    assert document.values[("quoted",)].block is False
    assert document.value["literal"] == "a\nb\n"


def test_position_falls_back_to_the_nearest_ancestor() -> None:
    document = parse_yaml(b"outer:\n  inner: 1\n")
    assert document.position(("outer", "inner", "missing")) == Position(line=2, column=10)
    assert document.position(("outer", "inner"), key=True) == Position(line=2, column=3)
    assert document.position(("nowhere",)) == Position(line=1, column=1)


def test_key_position_falls_back_to_the_value_position_of_an_ancestor() -> None:
    document = parse_yaml(b"items:\n  - a\n")
    assert document.position(("items", 0), key=True) == Position(line=2, column=5)


def test_columns_count_characters_not_bytes() -> None:
    document = parse_yaml("é: ü\n".encode())
    assert document.value == {"é": "ü"}
    assert document.values[("é",)] == Position(line=1, column=4)


def test_json_pointer_escapes_slash_and_tilde() -> None:
    assert json_pointer(("a/b", "c~d", 0)) == "/a~1b/c~0d/0"
    assert json_pointer(()) == ""


def test_yaml_document_is_returned_with_every_position() -> None:
    document = parse_yaml(b"a: 1\n")
    assert isinstance(document, YamlDocument)
    assert set(document.values) == {(), ("a",)}
    assert set(document.keys) == {("a",)}


# --- merge keys, anchors and aliases ----------------------------------------------


def test_merge_key_copies_the_anchored_mapping() -> None:
    document = parse_yaml(b"x-base: &base {a: 1, b: 2}\nderived:\n  <<: *base\n  c: 3\n")
    assert document.value["derived"] == {"a": 1, "b": 2, "c": 3}


def test_explicit_key_overrides_a_merged_one_without_being_a_duplicate() -> None:
    document = parse_yaml(b"x-base: &base {a: 1}\nderived:\n  <<: *base\n  a: 2\n")
    assert document.value["derived"] == {"a": 2}


def test_merge_of_a_list_of_mappings_is_accepted() -> None:
    document = parse_yaml(b"x: &x {a: 1}\ny: &y {b: 2}\nz:\n  <<: [*x, *y]\n")
    assert document.value["z"] == {"a": 1, "b": 2}


def test_duplicate_key_inside_an_inline_merged_mapping_is_reported() -> None:
    issue = _only_issue(b"d:\n  <<: {a: 1, a: 2}\n")
    assert "duplicate key 'a'" in issue.message


def test_merge_of_a_scalar_is_rejected() -> None:
    issue = _only_issue(b"a:\n  <<: 1\n")
    assert "cannot be read" in issue.message


def test_aliases_reused_within_the_limit_are_expanded() -> None:
    document = parse_yaml(b"a: &a [1, 2, 3]\nb: *a\nc: {list: *a}\n")
    assert document.value == {"a": [1, 2, 3], "b": [1, 2, 3], "c": {"list": [1, 2, 3]}}


def test_billion_laughs_is_refused_before_it_is_built() -> None:
    levels = [b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        refs = ", ".join([f"*a{level - 1}"] * 10).encode()
        levels.append(f"a{level}: &a{level} [".encode() + refs + b"]")
    issue = _only_issue(b"\n".join(levels) + b"\n")
    assert "expands to more than 100000 values (aliases included)" in issue.message
    assert issue.line is not None


def test_alias_expansion_is_bounded_by_max_nodes() -> None:
    data = b"a: &a [1, 2, 3, 4, 5]\nb: [*a, *a, *a, *a]\n"
    assert parse_yaml(data).value["b"] == [[1, 2, 3, 4, 5]] * 4
    issue = _only_issue(data, limits=YamlLimits(max_nodes=20))
    assert "expands to more than 20 values" in issue.message


def test_recursive_alias_is_rejected() -> None:
    issue = _only_issue(b"a: &a\n  b: *a\n")
    assert "recursive alias" in issue.message
    assert issue.line == 1


def test_alias_to_its_own_sequence_is_rejected() -> None:
    issue = _only_issue(b"a: &a [1, *a]\n")
    assert "recursive alias" in issue.message


# --- limits -------------------------------------------------------------------------


def test_nesting_up_to_the_depth_limit_is_accepted() -> None:
    # the root mapping plus four lists is five levels
    assert parse_yaml(b"a: [[[[1]]]]\n", limits=YamlLimits(max_depth=5)).value == {"a": [[[[1]]]]}


def test_nesting_deeper_than_the_limit_is_rejected_with_its_position() -> None:
    issue = _only_issue(b"a: [[[[[1]]]]]\n", limits=YamlLimits(max_depth=5))
    assert issue.message == "nesting is deeper than 5 levels"
    assert (issue.line, issue.column) == (1, 8)


def test_very_deep_document_is_refused_without_reaching_the_recursive_composer() -> None:
    depth = 100_000
    issue = _only_issue(b"[" * depth + b"]" * depth)
    assert "nesting is deeper than 64 levels" in issue.message


@pytest.mark.parametrize("depth", [65, 999, 1_000, 1_001, 1_025, 5_000])
@pytest.mark.parametrize("style", ["flow-list", "flow-map", "block"])
def test_our_depth_limit_speaks_at_every_depth_whatever_libyaml_refuses(depth: int, style: str) -> None:
    # libyaml (PyYAML 6.0.4 on) stops near 1,000 levels with its own words;
    # the registry's message, with the place of level 65, is given at any depth.
    if style == "flow-list":
        data = b"[" * depth + b"]" * depth
        where = (1, 65)
    elif style == "flow-map":
        data = b"{a: " * depth + b"1" + b"}" * depth
        where = (1, 4 * 64 + 1)
    else:
        data = b"- " * depth + b"x\n"  # compact block sequences, one inside the next
        where = (1, 2 * 64 + 1)
    issue = _only_issue(data)
    assert issue.message == "nesting is deeper than 64 levels"
    assert (issue.line, issue.column) == where


def test_a_deep_document_with_a_syntax_error_before_the_limit_reports_that_error() -> None:
    issue = _only_issue(b"a: [1, 2\nb: " + b"[" * 2_000 + b"]" * 2_000)
    assert issue.message.startswith("YAML syntax error:")
    assert issue.line is not None and issue.line <= 2


def test_event_limit_is_enforced() -> None:
    data = b"a: [" + b", ".join([b"1"] * 100) + b"]\n"
    assert len(parse_yaml(data).value["a"]) == 100
    issue = _only_issue(data, limits=YamlLimits(max_events=50))
    assert "more than 50 YAML events" in issue.message


def test_file_at_the_size_limit_is_accepted_and_one_byte_more_is_not() -> None:
    limits = YamlLimits(max_bytes=50)
    at_limit = b"a: " + b"x" * 47
    assert parse_yaml(at_limit, limits=limits).value == {"a": "x" * 47}
    issue = _only_issue(at_limit + b"x", limits=limits)
    assert issue.message == "file is 51 bytes; the limit is 50 bytes"


def test_size_is_checked_before_the_text_is_decoded() -> None:
    issue = _only_issue(b"\xff" * 100, limits=YamlLimits(max_bytes=10))
    assert "the limit is 10 bytes" in issue.message


# --- keys ------------------------------------------------------------------------------


def test_duplicate_key_names_the_line_of_the_first() -> None:
    issue = _only_issue(b"a: 1\nb: 2\na: 3\n")
    assert issue.message == "duplicate key 'a' (first defined on line 1)"
    assert (issue.path, issue.line, issue.column) == ("/a", 3, 1)
    assert issue.hint == "remove one of the two"


def test_nested_duplicate_key_has_its_json_path() -> None:
    issue = _only_issue(b"outer:\n  x/y: 1\n  other: 2\n  x/y: 3\n")
    assert issue.message == "duplicate key 'x/y' (first defined on line 2)"
    assert (issue.path, issue.line, issue.column) == ("/outer/x~1y", 4, 3)


@pytest.mark.parametrize("key", [b"1", b"1.5", b"~", b"null", b"on", b"off", b"yes", b"no", b"true", b"False"])
def test_key_that_yaml_reads_as_another_type_is_rejected(key: bytes) -> None:
    issue = _only_issue(key + b": value\n")
    assert issue.message == f"mapping key {key.decode()!r} is not a string"
    assert issue.hint == "quote the key"
    assert (issue.line, issue.column) == (1, 1)


def test_quoted_yaml_11_boolean_keys_are_strings() -> None:
    assert parse_yaml(b"'on': 1\n\"yes\": 2\n").value == {"on": 1, "yes": 2}


def test_collection_key_is_rejected() -> None:
    issue = _only_issue(b"? [a, b]\n: value\n")
    assert "is not a string" in issue.message


def test_yaml_11_booleans_as_values_stay_booleans() -> None:
    assert parse_yaml(b"a: on\nb: no\n").value == {"a": True, "b": False}


# --- tags and types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "tag"),
    [
        (b"a: !!binary aGVsbG8=\n", "tag:yaml.org,2002:binary"),
        (b"a: !!set {x, y}\n", "tag:yaml.org,2002:set"),
        (b"a: !!omap [{x: 1}]\n", "tag:yaml.org,2002:omap"),
        (b"a: !!python/object:os.system {}\n", "tag:yaml.org,2002:python/object:os.system"),
        (b"a: !!python/name:os.system\n", "tag:yaml.org,2002:python/name:os.system"),
        (b"a: !custom 3\n", "!custom"),
        (b"a: !custom [3]\n", "!custom"),
        (b"a: !custom {b: 3}\n", "!custom"),
    ],
)
def test_tag_outside_json_types_is_rejected_with_its_position(data: bytes, tag: str) -> None:
    issue = _only_issue(data)
    assert issue.message.startswith(f"unsupported YAML tag {tag!r}")
    assert (issue.path, issue.line, issue.column) == ("/a", 1, 4)


def test_explicit_json_tags_are_accepted() -> None:
    assert parse_yaml(b"a: !!str 123\nb: !!int '7'\n").value == {"a": "123", "b": 7}


def test_timestamps_are_kept_as_the_strings_written() -> None:
    document = parse_yaml(b"day: 2024-11-04\nwhen: 2024-10-01T09:12:00Z\nnested: [2001-12-14 21:59:43.10 -5]\n")
    assert document.value == {
        "day": "2024-11-04",
        "when": "2024-10-01T09:12:00Z",
        "nested": ["2001-12-14 21:59:43.10 -5"],
    }
    json.dumps(document.value)


def test_every_non_finite_float_is_reported_with_its_position() -> None:
    issues = _issues(b"a: .inf\nb: [-.inf]\nc: .NaN\nd: 1.5\n")
    assert [(i.path, i.line, i.column) for i in issues] == [("/a", 1, 4), ("/b/0", 2, 5), ("/c", 3, 4)]
    assert all("is not finite; JSON cannot carry it" in i.message for i in issues)


def test_float_that_overflows_to_infinity_is_rejected() -> None:
    issue = _only_issue(b"a: 1.0e+400\n")
    assert issue.message == "number inf is not finite; JSON cannot carry it"


def test_exponent_without_sign_or_dot_is_a_string_as_in_yaml_11() -> None:
    assert parse_yaml(b"a: 1e400\nb: 1.0e400\n").value == {"a": "1e400", "b": "1.0e400"}


def test_long_integer_literal_within_python_limits_is_read_exactly() -> None:
    assert parse_yaml(b"a: " + b"9" * 100 + b"\n").value == {"a": int("9" * 100)}


def test_huge_integer_literal_is_a_yaml_error_not_a_crash() -> None:
    issue = _only_issue(b"a: " + b"9" * 5000 + b"\n")
    assert issue.message.startswith("YAML value cannot be read")


# --- text encoding ----------------------------------------------------------------------


def test_non_utf8_bytes_are_rejected_with_their_offset() -> None:
    issue = _only_issue(b"a: 1\nb: \xc3\x28\n")
    assert issue.message == "file is not UTF-8 text (invalid byte at offset 8)"


def test_utf16_text_is_rejected() -> None:
    assert "not UTF-8" in _only_issue("a: 1\n".encode("utf-16")).message


@pytest.mark.parametrize("character", [b"\x00", b"\x07", b"\x1b"])
def test_raw_control_characters_are_rejected(character: bytes) -> None:
    issue = _only_issue(b"a: b" + character + b"c\n")
    assert "control characters are not allowed" in issue.message


def test_utf8_byte_order_mark_is_accepted() -> None:
    document = parse_yaml(b"\xef\xbb\xbfa: 1\n")
    assert document.value == {"a": 1}
    assert document.keys[("a",)] == Position(line=1, column=1)


# --- documents ----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"\n\n", b"# only a comment\n"])
def test_empty_file_is_rejected(data: bytes) -> None:
    assert _only_issue(data).message == "file is empty; a definition is a YAML mapping"


def test_explicit_empty_document_reads_as_null() -> None:
    assert parse_yaml(b"---\n").value is None


def test_multiple_documents_are_rejected_at_the_second() -> None:
    issue = _only_issue(b"a: 1\n---\nb: 2\n")
    assert issue.message.startswith("YAML syntax error")
    assert issue.line == 2


def test_explicit_start_and_end_markers_of_one_document_are_accepted() -> None:
    assert parse_yaml(b"---\na: 1\n...\n").value == {"a": 1}


def test_syntax_error_has_a_line_and_column() -> None:
    issue = _only_issue(b"a: 1\nb: [1, 2\nc: 3\n")
    assert issue.message.startswith("YAML syntax error:")
    assert issue.line is not None and issue.column is not None


@pytest.mark.parametrize(
    ("data", "line", "column"),
    [
        (b"name: x\nprompt_templates:\n\tsystem: hi\n", 3, 1),
        (b"a:\n  b: 1\n\tc: 2\n", 3, 1),
        (b"a:\n \tb: 1\n", 2, 2),
        (b"a: |\n  x\n\ty\n", 3, 1),
        (b"- a\n-\tb\n", 2, 2),
        (b"a: 1\r\n\tb: 2\r\n", 2, 1),
    ],
    ids=["mapping", "under-a-mapping", "after-spaces", "block-scalar", "sequence-entry", "crlf"],
)
def test_a_tab_in_indentation_is_named_with_its_line_and_column(data: bytes, line: int, column: int) -> None:
    issue = _only_issue(data)
    assert (issue.message, issue.line, issue.column) == ("tabs are not allowed in YAML indentation", line, column)
    assert issue.hint == "indent with spaces" and issue.rule == "yaml-syntax"


def test_tabs_elsewhere_are_fine_or_another_error() -> None:
    assert parse_yaml(b"a:\tb\nc: [1,\t2]\n").value == {"a": "b", "c": [1, 2]}
    assert _only_issue(b"a: b\tc: d\n").message.startswith("YAML syntax error:")


def test_every_structural_problem_is_reported_at_once() -> None:
    issues = _issues(b"a: 1\na: 2\n1: x\nb: !!binary aGk=\nc: .inf\n")
    messages = [i.message for i in issues]
    assert len(issues) == 3, messages
    assert any(m.startswith("duplicate key 'a'") for m in messages)
    assert any(m == "mapping key '1' is not a string" for m in messages)
    assert any(m.startswith("unsupported YAML tag") for m in messages)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        pytest.param(b"a: 1\nb: x\x00y\n", 2, id="raw-nul-byte"),
        pytest.param(b"a: 1\nb:\n  <<: 1\n", 3, id="merge-of-a-scalar"),
        pytest.param(b"a: 1\nb: " + b"9" * 5000 + b"\n", 2, id="5000-digit-integer"),
    ],
)
def test_errors_found_while_reading_values_name_their_line(data: bytes, line: int) -> None:
    issue = _only_issue(data)
    assert issue.line == line
    assert "<unicode string>" not in issue.message


# --- settings files -------------------------------------------------------------


def _read_error(path: Path) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        read_yaml_file(path, what="settings file", when_empty="it needs a mapping")
    return caught.value


def test_a_settings_file_is_read_into_its_document(tmp_path: Path) -> None:
    path = tmp_path / "s.yml"
    path.write_text("a: [1, 2]\n", encoding="utf-8")
    document = read_yaml_file(path, what="settings file", when_empty="it needs a mapping")
    assert document.value == {"a": [1, 2]}
    assert document.position(("a", 1)) == Position(1, 8)


def test_a_settings_file_that_is_missing_unreadable_or_empty_is_one_named_error(tmp_path: Path) -> None:
    (tmp_path / "empty.yml").write_text(" \n\n", encoding="utf-8")
    assert str(_read_error(tmp_path / "missing.yml")) == f"settings file {tmp_path / 'missing.yml'} does not exist"
    assert str(_read_error(tmp_path)) == f"settings file {tmp_path} cannot be read: Is a directory"
    empty = _read_error(tmp_path / "empty.yml")
    assert str(empty) == f"settings file {tmp_path / 'empty.yml'} is empty; it needs a mapping"
    assert empty.errors == []


def test_every_problem_of_a_settings_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yml"
    path.write_text("a: 1\na: 2\nb: !!binary aGk=\n", encoding="utf-8")
    error = _read_error(path)
    assert [(issue.file, issue.line) for issue in error.errors] == [(str(path), 2), (str(path), 3)]
    assert str(error) == f"{path}:2:1: duplicate key 'a' (first defined on line 1), and 1 more problem"
