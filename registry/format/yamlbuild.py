"""Building one value from YAML events in one pass, checked as ``parse_yaml``
checks a document.

``registry.format.yamlstream`` reads a long file piece by piece; each piece
is built here from its events as they arrive, without composing a node tree
first: PyYAML's composer, constructor and ``safeyaml``'s three walks over the
tree cost several times what one pass does, and a dataset repeats them per
case. The checks are ``parse_yaml``'s, and tests/format/test_yamlstream.py
holds the two to the same values and the same verdicts:

- nesting and the number of values are bounded with every alias expanded
  (an alias counts what its anchor holds), and an alias to a collection it
  is inside (a recursive alias) is refused;
- duplicate keys, keys that are not strings, and tags outside JSON's types
  are problems; timestamps are kept as strings, non-finite floats refused;
- merge keys (``<<: *base``) merge as PyYAML merges them.

Past a limit, nothing more is kept: the events are only counted to the end
of the piece, so that the next one starts where it should.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from registry.format.safeyaml import JsonPath, Position, YamlLimits
from registry.models import Issue, json_pointer, shorten

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL, _TIMESTAMP = (_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
_MERGE = _TAG + "merge"
_SEQ = _TAG + "seq"
_MAP = _TAG + "map"
_OPENING = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSING = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_RESOLVER = Resolver()
_CONSTRUCTOR = SafeConstructor()


class _Key:
    """What a mapping waits for or has read in place of a key."""

    def __init__(self, name: str) -> None:
        self.name = name


_EXPECTING = _Key("expecting a key")
_DROPPED = _Key("a key that is not kept: its value is read and dropped")
_MERGING = _Key("the merge key <<")
_UNREADABLE = (None, 0, 0)
"""The anchor of a value past a limit: an alias to it is a problem, but not a second report of the limit."""


class _Frame:
    """An open collection: what it holds so far, and what it waits for."""

    __slots__ = ("anchor", "container", "depth", "key", "line_of", "mark", "merges", "path", "size")

    def __init__(self, container: dict[str, Any] | list[Any], path: JsonPath, anchor: str | None, mark: Any) -> None:
        self.container = container
        self.path = path
        self.anchor = anchor
        self.mark = mark
        """Where it opens."""
        self.size = 1
        self.depth = 0
        self.key: _Key | str = _EXPECTING
        self.line_of: dict[str, int] = {}
        """Where each key was first written (mappings)."""
        self.merges: list[Any] = []


def scalar_tag(event: Any) -> str:
    """The tag of a scalar event: its own, or the one YAML 1.1 resolves it to."""
    if event.tag not in (None, "!"):
        return str(event.tag)
    return str(_RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit))  # type: ignore[no-untyped-call]


class Builder:
    """Builds the value of one piece from its events (``feed`` each in turn)."""

    def __init__(self, limits: YamlLimits, anchors: dict[str, Any], path: JsonPath, depth: int) -> None:
        """``anchors`` are those the piece may alias (as ``(value, size,
        depth)``), and take its own; ``path`` is where the piece is in the
        file and ``depth`` how many levels are open above it."""
        self.value: Any = None
        self.values: dict[JsonPath, Position] = {}
        self.keys: dict[JsonPath, Position] = {}
        self.issues: list[Issue] = []
        self._limits = limits
        self._anchors = anchors
        self._path = path
        self._depth = depth
        self._stack: list[_Frame] = []
        self._level = 0
        self._events = 0
        self._values = 0
        self._start: int | None = None
        self._stopped = False
        self._unreadable: set[str] = set()
        self._defined: list[str] = []

    def feed(self, event: Any) -> bool:
        """Take the next event; True once the piece's value is complete."""
        if self._start is None:
            self._start = event.start_mark.index
        self._events += 1
        if isinstance(event, _OPENING):
            self._level += 1
        elif isinstance(event, _CLOSING):
            self._level -= 1
        if not self._stopped:
            problem = self._over_limit(event)
            if problem is not None:
                self._stop(problem, event.start_mark)
            else:
                self._take(event)
        if self._level != 0:
            return False
        if self.issues:
            # A value with a problem is not one to build on: what aliases it is refused too.
            for anchor in self._defined:
                self._anchors[anchor] = _UNREADABLE
        return True

    def _over_limit(self, event: Any) -> str | None:
        limits = self._limits
        if self._depth + self._level > limits.max_depth:
            return f"nesting is deeper than {limits.max_depth} levels"
        if self._events > limits.max_events:
            return f"this value has more than {limits.max_events} YAML events"
        if event.end_mark.index - (self._start or 0) > limits.max_bytes:
            return f"this value is more than {limits.max_bytes} characters long"
        return None

    def _stop(self, problem: str, mark: Any) -> None:
        """Past a limit: keep nothing more, and say which."""
        self._stopped = True
        for frame in self._stack:
            if frame.anchor is not None:
                self._anchors.setdefault(frame.anchor, _UNREADABLE)
        self._stack.clear()
        self.values.clear()
        self.keys.clear()
        self._problem(problem, mark, self._path)

    def _problem(
        self, message: str, mark: Any, path: JsonPath, *, hint: str | None = None, rule: str = "yaml-syntax"
    ) -> None:
        self.issues.append(
            Issue(
                message=message,
                path=json_pointer(path),
                line=mark.line + 1,
                column=mark.column + 1,
                hint=hint,
                rule=rule,
            )
        )

    # --- events ----------------------------------------------------------------------------------

    def _take(self, event: Any) -> None:
        if isinstance(event, yaml.ScalarEvent):
            parent = self._expecting_key()
            if parent is not None:
                self._key(parent, event.value, scalar_tag(event), event.start_mark)
            else:
                value = self._scalar(event)
                self._remember(event.anchor, value, 1, 0, event.start_mark)
                self._place(value, event.start_mark, 1, 0, block=event.style == "|")
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)
        elif isinstance(event, _OPENING):
            self._open(event)
        elif isinstance(event, _CLOSING):
            self._close()

    def _expecting_key(self) -> _Frame | None:
        """The open mapping, when what comes next is one of its keys."""
        parent = self._stack[-1] if self._stack else None
        if parent is None or parent.key is not _EXPECTING or isinstance(parent.container, list):
            return None
        return parent

    def _child_path(self) -> JsonPath:
        if not self._stack:
            return self._path
        parent = self._stack[-1]
        if isinstance(parent.container, list):
            return parent.path + (len(parent.container),)
        key = parent.key
        return parent.path + (key,) if isinstance(key, str) else parent.path

    def _key(self, parent: _Frame, name: Any, tag: str, mark: Any) -> None:
        if tag == _MERGE:
            parent.key = _MERGING
        elif tag != _STR:
            message = f"mapping key {shorten(name, 60)!r} is not a string"
            self._problem(message, mark, parent.path, hint="quote the key")
            parent.key = _DROPPED
        elif name in parent.line_of:
            message = f"duplicate key {shorten(name, 60)!r} (first defined on line {parent.line_of[name]})"
            path = parent.path + (name,)
            self._problem(message, mark, path, hint="remove one of the two", rule="duplicate-key")
            parent.key = _DROPPED
        else:
            parent.line_of[name] = mark.line + 1
            self.keys[parent.path + (name,)] = Position(line=mark.line + 1, column=mark.column + 1)
            parent.key = name

    def _scalar(self, event: Any) -> Any:
        tag = scalar_tag(event)
        value = event.value
        if tag in (_STR, _TIMESTAMP):
            return value
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return _CONSTRUCTOR.bool_values[value.lower()]
        path = self._child_path()
        if tag not in (_INT, _FLOAT):
            self._problem(f"unsupported YAML tag {tag!r}; use plain JSON types", event.start_mark, path)
            return None
        node = yaml.ScalarNode(tag, value)
        try:
            number = _CONSTRUCTOR.construct_yaml_int(node) if tag == _INT else _CONSTRUCTOR.construct_yaml_float(node)
        except (ValueError, IndexError):
            what = f"integer {value[:20]}... is too long" if tag == _INT and len(value) > 20 else repr(value[:20])
            self._problem(f"YAML value cannot be read: {what}", event.start_mark, path)
            return None
        if isinstance(number, float) and not math.isfinite(number):
            self._problem(f"number {number!r} is not finite; JSON cannot carry it", event.start_mark, path)
            return None
        return number

    def _alias(self, event: Any) -> None:
        anchored = self._anchors.get(event.anchor)
        if anchored is _UNREADABLE:
            if event.anchor not in self._unreadable:  # once a piece is enough
                self._unreadable.add(event.anchor)
                message = f"alias *{shorten(event.anchor, 40)} names a value that could not be read"
                self._problem(message, event.start_mark, self._child_path())
            anchored = (None, 1, 0)
        elif anchored is None:
            if any(frame.anchor == event.anchor for frame in self._stack):
                message = "an alias refers to a node that contains it (recursive alias)"
            else:
                message = f"alias *{shorten(event.anchor, 40)} names no anchor before it in this part of the file"
            self._problem(message, event.start_mark, self._child_path())
            anchored = (None, 1, 0)
        value, size, depth = anchored
        parent = self._expecting_key()
        if parent is not None:
            self._key(parent, value, _STR if isinstance(value, str) else "a collection", event.start_mark)
        else:
            self._place(value, event.start_mark, size, depth)

    def _open(self, event: Any) -> None:
        mapping = isinstance(event, yaml.MappingStartEvent)
        expected = _MAP if mapping else _SEQ
        tag = event.tag if event.tag not in (None, "!") else expected
        path = self._child_path()
        if tag != expected:
            kind = "mapping" if mapping else "list"
            self._problem(f"unsupported YAML tag {tag!r}; use a plain {kind}", event.start_mark, path)
        container: dict[str, Any] | list[Any] = {} if mapping else []
        self._stack.append(_Frame(container, path, event.anchor, event.start_mark))

    def _close(self) -> None:
        frame = self._stack.pop()
        if frame.merges:
            self._merge(frame)
        self._remember(frame.anchor, frame.container, frame.size, frame.depth + 1, frame.mark)
        self._place(frame.container, frame.mark, frame.size, frame.depth + 1)

    def _merge(self, frame: _Frame) -> None:
        """A mapping with merge keys: the keys merged first (the first source
        of a key wins), then its own, which win over any merged."""
        merged: dict[str, Any] = {}
        for source in frame.merges:
            sources = source if isinstance(source, list) else [source]
            if not all(isinstance(each, dict) for each in sources):
                message = "YAML value cannot be read: expected a mapping or list of mappings for merging"
                self._problem(message, frame.mark, frame.path)
                continue
            for each in sources:
                for key, value in each.items():
                    merged.setdefault(key, value)
        assert isinstance(frame.container, dict)
        merged.update(frame.container)
        frame.container = merged

    def _remember(self, anchor: str | None, value: Any, size: int, depth: int, mark: Any) -> None:
        if anchor is None:
            return
        if anchor in self._anchors:
            self._problem(f"anchor &{shorten(anchor, 40)} is defined twice", mark, self._path)
            return
        self._anchors[anchor] = (value, size, depth)
        self._defined.append(anchor)

    def _place(self, value: Any, mark: Any, size: int, depth: int, *, block: bool = False) -> None:
        """Put a complete value (one that starts at ``mark``) where it goes:
        the piece's value, or into the open collection."""
        path = self._child_path()
        parent = self._stack[-1] if self._stack else None
        if parent is None or isinstance(parent.container, list) or isinstance(parent.key, str):
            self.values.setdefault(path, Position(line=mark.line + 1, column=mark.column + 1, block=block))
        self._values += size
        if self._values > self._limits.max_nodes:
            self._stop(f"this value expands to more than {self._limits.max_nodes} values (aliases included)", mark)
        elif self._depth + len(self._stack) + depth > self._limits.max_depth:
            self._stop(f"nesting is deeper than {self._limits.max_depth} levels (aliases included)", mark)
        elif parent is None:
            self.value = value
        else:
            parent.size += size
            parent.depth = max(parent.depth, depth)
            self._put(parent, value, mark)

    def _put(self, parent: _Frame, value: Any, mark: Any) -> None:
        if isinstance(parent.container, list):
            parent.container.append(value)
            return
        key = parent.key
        if key is _EXPECTING:  # a collection where a key goes: its value is dropped
            self._problem("mapping key 'a collection' is not a string", mark, parent.path, hint="quote the key")
            parent.key = _DROPPED
            return
        parent.key = _EXPECTING
        if key is _MERGING:
            parent.merges.append(value)
        elif isinstance(key, str):
            parent.container[key] = value
