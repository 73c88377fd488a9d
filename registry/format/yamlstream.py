"""Reading a long YAML file piece by piece, in bounded memory.

``parse_yaml`` holds a whole document, and bounds its size (256 KB for a
definition). A dataset of 100,000 cases is neither small nor worth holding,
so ``stream_pieces`` reads a file whose top level is a mapping one piece at a
time: each top-level value is a piece, except the value of the ``streamed``
key, a sequence, whose items are pieces of their own. Each piece is built
from its events as they come (``registry.format.yamlbuild``), checked as
``parse_yaml`` checks a document: its nesting, its events and its values with
every alias expanded within the limits, duplicate keys, JSON's types. What
is in memory at once is one piece, and the anchors of the pieces before
the streamed sequence, whatever the file's length; the file's own size is
bounded only so that a runaway one ends.

Anchors: one defined in a top-level value may be aliased in any piece after
it; one defined inside an item of the streamed sequence only within that
item, so that no item is kept once it has been read.

A problem inside one piece is reported with that piece (``Piece.issues``) and
the next piece is read; a problem with the file as a whole (a syntax error,
after which nothing can be trusted; a top level that is not a mapping; a
second document; the size) raises ``YamlError`` from the iterator.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import yaml

from registry.format.safeyaml import JsonPath, Position, YamlDocument, YamlError, YamlLimits
from registry.format.yamlbuild import Builder, scalar_tag
from registry.models import Issue, json_pointer, shorten

_EventLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STRING_TAG = "tag:yaml.org,2002:str"
_OPENING = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSING = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


@dataclass(frozen=True)
class StreamLimits:
    """Bounds on what ``stream_pieces`` reads: the file, and each piece."""

    max_bytes: int = 1 << 30
    """The whole file: large datasets are the point, but a runaway file ends."""
    piece: YamlLimits = YamlLimits(max_bytes=1 << 20, max_events=50_000)
    """Each piece, as ``parse_yaml``'s limits bound a document; ``max_bytes``
    counts the characters of its text, and ``max_depth`` levels from the
    top of the file."""


@dataclass(frozen=True)
class Piece:
    """One top-level value, or one item of the streamed sequence."""

    path: JsonPath
    """``("agent",)`` for a top-level value; ``("cases", 7)`` for an item."""
    document: YamlDocument | None
    """Its value (``document.value``) and positions keyed by paths from the
    top of the file; None when ``issues`` say why it cannot be read."""
    start: Position
    """Where the value starts; for a top-level value, where its key does."""
    issues: tuple[Issue, ...] = ()
    items: bool = False
    """This is the streamed sequence itself, whose items follow, one piece
    each (it has no ``document``)."""


def stream_pieces(stream: IO[bytes], *, streamed: str, limits: StreamLimits = StreamLimits()) -> Iterator[Piece]:
    """The pieces of the YAML file read from ``stream``, in file order.

    Raises ``YamlError`` (from the iterator) when the file as a whole cannot
    be read on; the pieces before it were good as far as they went.
    """
    events = _events(_Bounded(stream, limits.max_bytes))
    first = _next(events)
    if isinstance(first, yaml.StreamStartEvent):
        first = _next(events)
    if isinstance(first, yaml.StreamEndEvent):
        raise YamlError([_issue("file is empty; it is a YAML mapping of keys", None)])
    top = _next(events)  # after the document's start
    if not isinstance(top, yaml.MappingStartEvent):
        hint = "write the file as a mapping of keys, one 'key: value' a line"
        raise YamlError([_issue("the file is not a mapping of keys", top.start_mark, hint=hint, rule="not-a-mapping")])
    reader = _PieceReader(events, streamed, limits.piece)
    yield from reader.top_level()
    _next(events)  # the document's end
    last = _next(events)
    if not isinstance(last, yaml.StreamEndEvent):
        raise YamlError([_issue("the file holds more than one YAML document; give it one", last.start_mark)])


class _PieceReader:
    """Reads the pieces of the top-level mapping from its events."""

    def __init__(self, events: Iterator[Any], streamed: str, limits: YamlLimits) -> None:
        self._events = events
        self._streamed = streamed
        self._limits = limits
        self._anchors: dict[str, Any] = {}
        """Of the top-level values read so far: an alias anywhere after may name them."""
        self._keys: dict[str, int] = {}

    def top_level(self) -> Iterator[Piece]:
        while True:
            event = _next(self._events)
            if isinstance(event, yaml.MappingEndEvent):
                return
            key, problem = self._key(event)
            value = _next(self._events)
            start = _position(event)
            if problem is not None:
                self._skip(value)
                yield Piece((), None, start, (problem,))
            elif key == self._streamed and isinstance(value, yaml.SequenceStartEvent):
                yield Piece((key,), None, start, items=True)
                yield from self._items(key)
            else:
                yield self._piece((key,), value, depth=1, start=start, anchors=self._anchors)

    def _key(self, event: Any) -> tuple[str, Issue | None]:
        """The top-level key ``event`` starts, or why it is not one."""
        if not isinstance(event, yaml.ScalarEvent) or scalar_tag(event) != _STRING_TAG:
            shown = event.value if isinstance(event, yaml.ScalarEvent) else "a collection"
            if isinstance(event, _OPENING):
                self._skip(event)
            message = f"mapping key {shorten(shown, 60)!r} is not a string"
            return "", _issue(message, event.start_mark, hint="quote the key")
        key = str(event.value)
        if key in self._keys:
            message = f"duplicate key {shorten(key, 60)!r} (first defined on line {self._keys[key]})"
            hint = "remove one of the two"
            return key, _issue(message, event.start_mark, path=(key,), hint=hint, rule="duplicate-key")
        self._keys[key] = _position(event).line
        return key, None

    def _items(self, key: str) -> Iterator[Piece]:
        index = 0
        while True:
            event = _next(self._events)
            if isinstance(event, yaml.SequenceEndEvent):
                return
            # An item's own anchors live only while it is read.
            yield self._piece((key, index), event, depth=2, start=_position(event), anchors=dict(self._anchors))
            index += 1

    def _piece(self, path: JsonPath, first: Any, *, depth: int, start: Position, anchors: dict[str, Any]) -> Piece:
        """The piece whose first event is ``first``, read to its end."""
        builder = Builder(self._limits, anchors, path, depth)
        event = first
        while not builder.feed(event):
            event = _next(self._events)
        if builder.issues:
            return Piece(path, None, start, tuple(builder.issues))
        return Piece(path, YamlDocument(builder.value, builder.values, builder.keys), start)

    def _skip(self, first: Any) -> None:
        """Read past the value ``first`` starts."""
        level = 0
        event = first
        while True:
            if isinstance(event, _OPENING):
                level += 1
            elif isinstance(event, _CLOSING):
                level -= 1
            if level == 0:
                return
            event = _next(self._events)


class _Bounded:
    """A stream that refuses to be read past ``limit`` bytes."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._left = limit
        self._limit = limit

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        self._left -= len(data)
        if self._left < 0:
            raise YamlError([_issue(f"file is more than {self._limit} bytes long", None, rule="file-size")])
        return data


def _events(stream: _Bounded) -> Iterator[Any]:
    """The file's YAML events, PyYAML's errors translated as they come."""
    try:
        yield from yaml.parse(stream, Loader=_EventLoader)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlError([_issue(f"YAML syntax error: {problem}", exc.problem_mark or exc.context_mark)]) from exc
    except yaml.reader.ReaderError as exc:
        message = f"character {exc.character!r} at offset {exc.position} is not allowed in YAML: {exc.reason}"
        raise YamlError([_issue(message, None)]) from exc
    except yaml.YAMLError as exc:
        raise YamlError([_issue(f"YAML error: {str(exc).splitlines()[0]}", None)]) from exc


def _next(events: Iterator[Any]) -> Any:
    event = next(events, None)
    if event is None:  # PyYAML's parser ends every stream with its end event
        raise YamlError([_issue("the file ends in the middle of a value", None)])
    return event


def _position(event: Any) -> Position:
    return Position(line=event.start_mark.line + 1, column=event.start_mark.column + 1)


def _issue(
    message: str, mark: Any, *, path: JsonPath = (), hint: str | None = None, rule: str = "yaml-syntax"
) -> Issue:
    line = column = None
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
    return Issue(message=message, path=json_pointer(path), line=line, column=column, hint=hint, rule=rule)
