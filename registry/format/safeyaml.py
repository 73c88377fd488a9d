"""Reading untrusted YAML into JSON-compatible data, with positions.

``parse_yaml`` is the only way definition bytes become Python values. It is
safe against the classic attacks and keeps where every value came from:

- size is checked before parsing, and the text must be UTF-8;
- nesting depth and the number of events are bounded by a first pass over the
  event stream (libyaml's composer recurses, so a deep document must never
  reach it);
- anchors and aliases are allowed, but the size of the document with every
  alias expanded is computed (linearly, with memoisation) and bounded, and an
  alias that contains itself is rejected, so a "billion laughs" file is
  refused before it is built;
- duplicate keys, non-string keys, and tags outside JSON's types (``!!binary``,
  ``!!set``, custom tags) are errors; timestamps are kept as strings and
  non-finite floats are rejected, so the result always serialises to JSON.

Every problem is reported as an ``Issue`` with a line and column.
``read_yaml_file`` reads a settings file (a models file, a script of
replies) and words every way it can fail as one ``ConfigurationError``;
``located_issue`` places a problem its checks find at its line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from registry.errors import ConfigurationError, summarize
from registry.models import Issue, json_pointer

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader in libyaml where the wheel has it (a tenth of the
pure-Python parse), else in Python: for a document read whole, as our own
OpenAPI files are; what users write goes through ``parse_yaml`` and its limits."""

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_MERGE_TAG = _TAG + "merge"
_SEQ_TAG = _TAG + "seq"
_MAP_TAG = _TAG + "map"

JsonPath = tuple[str | int, ...]


class _DefinitionLoader(SAFE_LOADER):  # type: ignore[misc, valid-type]  # libyaml's loader or Python's, known at run time
    """The safe loader, with timestamps read as plain strings."""


class _PythonEventLoader(yaml.SafeLoader):
    """PyYAML's own parser, which sets no nesting limit of its own.

    libyaml (from PyYAML 6.0.4's wheels on) refuses documents nested about
    1,000 levels deep while its scanner looks ahead, before the first pass
    has seen 64 of them; a document libyaml refuses is passed again through
    this parser, so the registry's own limit speaks whatever the version.
    """


_DefinitionLoader.add_constructor(_TAG + "timestamp", yaml.SafeLoader.construct_yaml_str)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """YAML's int, with a located error for literals Python refuses to convert."""
    try:
        return int(yaml.SafeLoader.construct_yaml_int(loader, node))
    except ValueError as exc:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer {node.value[:20]}... is too long", node.start_mark
        ) from exc


_DefinitionLoader.add_constructor(_TAG + "int", _construct_int)


@dataclass(frozen=True)
class Position:
    """Where a value starts in the file (1-based).

    ``block`` is true for literal ``|`` scalars, whose content starts on the
    line after the indicator and keeps one text line per file line (folded
    ``>`` scalars join lines, so their text lines do not map to the file).
    """

    line: int
    column: int
    block: bool = False


@dataclass(frozen=True)
class YamlDocument:
    """A parsed document and the position of every value and key in it."""

    value: Any
    values: dict[JsonPath, Position]
    keys: dict[JsonPath, Position]

    def position(self, path: JsonPath, *, key: bool = False) -> Position | None:
        """The position of ``path``, or of its nearest ancestor that has one."""
        table = self.keys if key else self.values
        for end in range(len(path), -1, -1):
            found = table.get(path[:end]) or (self.values.get(path[:end]) if key else None)
            if found is not None:
                return found
        return None


@dataclass(frozen=True)
class YamlLimits:
    """Bounds on what ``parse_yaml`` accepts."""

    max_bytes: int = 256 * 1024
    max_depth: int = 64
    max_events: int = 200_000
    max_nodes: int = 100_000


class YamlError(Exception):
    """The text is not an acceptable YAML document; ``issues`` says why."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__("; ".join(i.message for i in issues))
        self.issues = issues


def _issue(
    message: str, mark: Any = None, *, path: JsonPath = (), hint: str | None = None, rule: str = "yaml-syntax"
) -> Issue:
    line = column = None
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
    return Issue(message=message, path=json_pointer(path), line=line, column=column, hint=hint, rule=rule)


def parse_yaml(data: bytes, *, limits: YamlLimits = YamlLimits()) -> YamlDocument:
    """Parse one YAML document of JSON-compatible values.

    Raises ``YamlError`` with every problem found; the parse stops at the first
    syntax error, since nothing after it can be trusted.
    """
    root = _composed(_decoded(data, limits), limits)
    issues: list[Issue] = []
    values: dict[JsonPath, Position] = {}
    keys: dict[JsonPath, Position] = {}
    _measure(root, limits)
    _inspect(root, (), values, keys, issues, set())
    if issues:
        raise YamlError(issues)
    value = _constructed(root)
    _check_finite(value, (), issues, values)
    if issues:
        raise YamlError(issues)
    return YamlDocument(value=value, values=values, keys=keys)


def read_yaml_file(path: str | Path, *, what: str, when_empty: str, limits: YamlLimits = YamlLimits()) -> YamlDocument:
    """The document in the YAML file at ``path``, which messages call
    ``what`` and its path (``models file m.yml``).

    Raises ``ConfigurationError`` when the file does not exist, cannot be
    read, is empty (the message then ends with ``when_empty``, what the file
    should hold), or is not an acceptable document: then with every problem
    as ``errors``, each naming the file, and the first in its message.
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise ConfigurationError(f"{what} {name} does not exist") from exc
    except OSError as exc:
        raise ConfigurationError(f"{what} {name} cannot be read: {exc.strerror or exc}") from exc
    if not data.strip():
        raise ConfigurationError(f"{what} {name} is empty; {when_empty}")
    try:
        return parse_yaml(data, limits=limits)
    except YamlError as exc:
        issues = [replace(issue, file=name) for issue in exc.issues]
        raise ConfigurationError(summarize(issues), errors=issues) from exc


def kind_of(value: Any) -> str:
    """What a parsed YAML value is, in words, for a problem's message:
    ``a mapping``, ``a list``, ``true or false``, ``nothing``..."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true or false"
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def located_issue(
    message: str,
    document: YamlDocument | None,
    path: JsonPath,
    *,
    file: str,
    key: str | None = None,
    rule: str | None = None,
) -> Issue:
    """A problem at ``path`` of ``document`` in ``file``, or at its ``key``:
    then on the line of the key itself, while the path stays the mapping's,
    whose key the message names. Without a document, it has no line."""
    at = path if key is None else path + (key,)
    position = document.position(at, key=key is not None) if document is not None else None
    return Issue(
        message=message,
        path=json_pointer(path),
        file=file,
        line=position.line if position else None,
        column=position.column if position else None,
        rule=rule,
    )


def _decoded(data: bytes, limits: YamlLimits) -> str:
    """The text of a file within the size limit and in UTF-8."""
    if len(data) > limits.max_bytes:
        raise YamlError([_issue(f"file is {len(data)} bytes; the limit is {limits.max_bytes} bytes", rule="file-size")])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlError([_issue(f"file is not UTF-8 text (invalid byte at offset {exc.start})")]) from exc


def _composed(text: str, limits: YamlLimits) -> yaml.Node:
    """The node tree of ``text``, once its event stream is within ``limits``."""
    try:
        _check_event_stream(text, limits)
        root = yaml.compose(text, Loader=_DefinitionLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if _is_indenting_tab(text, mark):
            # libyaml words this a few ways, none of them naming the fix.
            issue = _issue("tabs are not allowed in YAML indentation", mark, hint="indent with spaces")
            raise YamlError([issue]) from exc
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlError([_issue(f"YAML syntax error: {problem}", mark)]) from exc
    except yaml.reader.ReaderError as exc:
        line, column = _line_and_column(text, exc.position)
        raise YamlError(
            [
                Issue(
                    message=f"character {exc.character!r} is not allowed in YAML: {exc.reason}",
                    line=line,
                    column=column,
                    rule="yaml-syntax",
                )
            ]
        ) from exc
    except yaml.YAMLError as exc:
        raise YamlError([_issue(f"YAML error: {str(exc).splitlines()[0]}")]) from exc
    if root is None:
        raise YamlError([_issue("file is empty; a definition is a YAML mapping")])
    return root


def _constructed(root: yaml.Node) -> Any:
    """The value of a checked node tree."""
    try:
        return _DefinitionLoader("").construct_document(root)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "invalid value"
        raise YamlError(
            [_issue(f"YAML value cannot be read: {problem}", exc.problem_mark or exc.context_mark)]
        ) from exc
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        # The constructor's own failures, which only hostile files reach.
        raise YamlError([_issue(f"YAML value cannot be read: {str(exc).splitlines()[0]}")]) from exc


def _check_event_stream(text: str, limits: YamlLimits) -> None:
    read = _EventsRead()
    try:
        _count_events(text, limits, _DefinitionLoader, read)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        end = len(text) if mark is None else min(len(text), mark.index + 1)
        if SAFE_LOADER is yaml.SafeLoader or read.depth + _most_levels(text, read.end, end) <= limits.max_depth:
            raise
        # libyaml stopped deeper than the events it gave: what it read,
        # through the Python parser, raises our own limit's error if it
        # breaks it; else the syntax error stands, as libyaml words it.
        try:
            _count_events(text[:end], limits, _PythonEventLoader, _EventsRead())
        except yaml.YAMLError:
            pass  # the part ends mid-document; its own syntax error says nothing new
        raise


@dataclass
class _EventsRead:
    """How deep the events read so far go, and where the last one ends."""

    depth: int = 0
    end: int = 0


def _most_levels(text: str, start: int, end: int) -> int:
    """An upper bound of the levels ``text[start:end]`` can open: every level
    starts at a bracket, a line, or a block indicator (which may open a
    sequence and a mapping on one line). libyaml's scanner reads ahead of its
    events only so far, so this part is short but where a document is deep."""
    indicators = text.count("-", start, end) + text.count("?", start, end)
    brackets = text.count("[", start, end) + text.count("{", start, end)
    return 1 + brackets + text.count("\n", start, end) + 2 * indicators


def _count_events(text: str, limits: YamlLimits, loader: type[Any], read: _EventsRead) -> None:
    events = 0
    for event in yaml.parse(text, Loader=loader):
        events += 1
        if events > limits.max_events:
            raise YamlError([_issue(f"document has more than {limits.max_events} YAML events", event.start_mark)])
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            read.depth += 1
            if read.depth > limits.max_depth:
                raise YamlError([_issue(f"nesting is deeper than {limits.max_depth} levels", event.start_mark)])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            read.depth -= 1
        read.end = event.end_mark.index if event.end_mark is not None else read.end


def _measure(root: yaml.Node, limits: YamlLimits) -> None:
    """Bound the size and depth of the document with every alias expanded.

    Sizes and depths are memoised per node, so a chain of aliases that would
    expand exponentially is measured in linear time.
    """
    measured: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()

    def measure(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in measured:
            return measured[key]
        if key in open_nodes:
            raise YamlError([_issue("an alias refers to a node that contains it (recursive alias)", node.start_mark)])
        open_nodes.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        results = [measure(child) for child in children]
        size = 1 + sum(r[0] for r in results)
        depth = 1 + max((r[1] for r in results), default=0) if children else 0
        if size > limits.max_nodes:
            raise YamlError(
                [_issue(f"document expands to more than {limits.max_nodes} values (aliases included)", node.start_mark)]
            )
        if depth > limits.max_depth:
            raise YamlError(
                [_issue(f"nesting is deeper than {limits.max_depth} levels (aliases included)", node.start_mark)]
            )
        open_nodes.discard(key)
        measured[key] = (size, depth)
        return size, depth

    measure(root)


# What YAML 1.1 (libyaml) counts as a line break.
_LINE_BREAK = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")


def _is_indenting_tab(text: str, mark: Any) -> bool:
    """Whether ``mark`` is at a tab with only indentation before it on its
    line: spaces, tabs and the ``-`` of block sequence entries."""
    if mark is None:
        return False
    lines = _LINE_BREAK.split(text, maxsplit=mark.line + 1)
    line = lines[mark.line] if mark.line < len(lines) else ""
    return line[mark.column : mark.column + 1] == "\t" and not line[: mark.column].strip(" \t-")


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _inspect(
    node: yaml.Node,
    path: JsonPath,
    values: dict[JsonPath, Position],
    keys: dict[JsonPath, Position],
    issues: list[Issue],
    seen: set[int],
) -> None:
    """Record positions, and find duplicate keys and non-JSON types."""
    values.setdefault(path, _position(node))
    if id(node) in seen:  # an alias: its content was inspected where it was defined
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if node.tag not in _SCALAR_TAGS:
            issues.append(
                _issue(f"unsupported YAML tag {node.tag!r}; use plain JSON types", node.start_mark, path=path)
            )
        return
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ_TAG:
            issues.append(_issue(f"unsupported YAML tag {node.tag!r}; use a plain list", node.start_mark, path=path))
        for index, child in enumerate(node.value):
            _inspect(child, path + (index,), values, keys, issues, seen)
        return
    if node.tag != _MAP_TAG:
        issues.append(_issue(f"unsupported YAML tag {node.tag!r}; use a plain mapping", node.start_mark, path=path))
        return
    first_seen: dict[str, yaml.Node] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            _inspect(value_node, path, values, keys, issues, seen)
            continue
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _TAG + "str":
            shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a collection"
            issues.append(
                _issue(
                    f"mapping key {shown!r} is not a string",
                    key_node.start_mark,
                    path=path,
                    hint="quote the key",
                )
            )
            continue
        name = key_node.value
        if name in first_seen:
            issues.append(
                _issue(
                    f"duplicate key {name!r} (first defined on line {first_seen[name].start_mark.line + 1})",
                    key_node.start_mark,
                    path=path + (name,),
                    hint="remove one of the two",
                    rule="duplicate-key",
                )
            )
            continue
        first_seen[name] = key_node
        keys[path + (name,)] = _position(key_node)
        _inspect(value_node, path + (name,), values, keys, issues, seen)


def _position(node: yaml.Node) -> Position:
    block = isinstance(node, yaml.ScalarNode) and node.style == "|"
    return Position(line=node.start_mark.line + 1, column=node.start_mark.column + 1, block=block)


def _check_finite(value: Any, path: JsonPath, issues: list[Issue], values: dict[JsonPath, Position]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        pos = values.get(path)
        issues.append(
            Issue(
                message=f"number {value!r} is not finite; JSON cannot carry it",
                path=json_pointer(path),
                line=pos.line if pos else None,
                column=pos.column if pos else None,
                rule="yaml-syntax",
            )
        )
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, path + (k,), issues, values)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_finite(v, path + (i,), issues, values)
