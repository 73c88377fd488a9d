"""The budget of render inputs: how many values, how deep and how much text
a caller may send before any schema work.

Validation costs time in proportion to the inputs (jsonschema, about 5 µs a
value), and a caller chooses them. So one walk (``measure``) counts their
values, depth and characters of text, stopping as soon as a budget is
exceeded, and inputs over it are refused at once; nesting deeper than
``MAX_VALIDATED_DEPTH`` is refused the same way, so that validating against a
recursive schema never reaches Python's recursion limit.
``holds_more_values`` finds a JSON text certainly over the values budget
before it is parsed. The client counts inputs as the server does, with these
limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from registry.models import Issue, json_pointer, shorten

MAX_VALIDATED_DEPTH = 48
"""Levels of nested arrays and objects jsonschema is given to validate."""
MAX_VALIDATED_VALUES = 10_000
"""Values (arrays, objects, strings, numbers, booleans, nulls) below the top
that are validated at most."""
MAX_VALIDATED_CHARS = 1024 * 1024
"""Characters of text (strings and keys) validated at most: all that a render
request of the default 1 MiB can carry."""


@dataclass(frozen=True)
class Excess:
    """A budget that ``measure`` found exceeded: ``budget`` is ``values``,
    ``depth`` or ``text``, and ``issue`` says so, with the limit."""

    budget: str
    issue: Issue


def measure(
    value: Any, *, max_values: int = MAX_VALIDATED_VALUES, max_chars: int = MAX_VALIDATED_CHARS
) -> Excess | None:
    """The first budget ``value`` exceeds, or None.

    The budgets: at most ``max_values`` values below the top, nesting at most
    ``MAX_VALIDATED_DEPTH`` levels, at most ``max_chars`` characters in its
    strings and keys. One walk over the arrays and objects, level by level,
    which stops as soon as a budget is exceeded, so it costs at most about
    ``max_values`` steps whatever ``value`` holds. The issue is at the
    top-level member (input) being measured when the budget ran out.

    Arrays and objects are ``list`` and ``dict`` exactly, as JSON decodes
    them (subclasses are not walked: the deadline still bounds them).
    """
    kind = value.__class__
    if kind is dict:
        chars = _key_chars(value)
        members: Iterator[tuple[str | int, Any]] = iter(value.items())
    elif kind is list:
        chars = 0
        members = enumerate(value)
    else:
        chars = len(value) if kind is str else 0
        return _too_much_text((), max_chars) if chars > max_chars else None
    values = len(value)
    if values > max_values:
        return _too_many_values((), max_values)
    if chars > max_chars:
        return _too_much_text((), max_chars)
    for name, member in members:
        kind = member.__class__
        if kind is str:
            chars += len(member)
            if chars > max_chars:
                return _too_much_text((name,), max_chars)
            continue
        if kind is not dict and kind is not list:
            continue
        level = [member]
        depth = 1
        while level:
            if depth >= MAX_VALIDATED_DEPTH and any(level):  # members one level deeper than the limit
                return too_deep((name,))
            level, values, chars = _count_level(level, values, chars, max_values)
            if values > max_values:
                return _too_many_values((name,), max_values)
            if chars > max_chars:
                return _too_much_text((name,), max_chars)
            depth += 1
    return None


def _count_level(level: list[Any], values: int, chars: int, max_values: int) -> tuple[list[Any], int, int]:
    """The arrays and objects one level below those of ``level``, and
    ``values`` and ``chars`` with ``level``'s counted in; the count stops as
    soon as ``values`` passes ``max_values``."""
    below = []
    for container in level:
        values += len(container)
        if values > max_values:
            break
        if container.__class__ is dict:
            chars += _key_chars(container)
            container = container.values()
        for child in container:
            kind = child.__class__
            if kind is str:
                chars += len(child)
            elif kind is dict or kind is list:
                below.append(child)
    return below, values, chars


# Bytes a JSON text may hold that the scan below does not need: all but the
# quote, the comma and the brackets of arrays and objects.
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'",[]{}')


def holds_more_values(document: bytes, limit: int) -> bool:
    """Whether the JSON text ``document`` certainly holds more than ``limit``
    values below its top, as ``measure`` counts them, found without parsing it.

    Parsing a megabyte of small arrays costs tens of milliseconds before
    ``measure`` can refuse it; this costs a few, and next to nothing for a
    text whose commas and openers are few wherever they stand. Every comma
    outside a string separates two values, and every array or object below
    the top is a value. A text whose brackets do not balance is left to the
    parser, which says what is wrong with it; for another text that is not
    JSON the answer means nothing.
    """
    commas = document.count(b",")
    openers = document.count(b"[") + document.count(b"{")
    if max(commas, openers - 1) <= limit:
        return False  # even counting those inside strings
    # Escaped backslashes, then escaped quotes, stand inside strings: with
    # them gone every quote opens or closes a string. Two quotes side by
    # side enclose nothing that counts (a string with no comma or bracket,
    # or the colon between a key and its value): dropping them changes no
    # other byte's side. What quotes are left alternate outside and inside.
    bare = document.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    bare = bare.replace(b'""', b"")
    outside = b"".join(bare.split(b'"')[::2]) if b'"' in bare else bare
    arrays, objects = outside.count(b"["), outside.count(b"{")
    if arrays != outside.count(b"]") or objects != outside.count(b"}"):
        return False  # not JSON: the parser says what is wrong with it
    return max(outside.count(b","), arrays + objects - 1) > limit


def _key_chars(mapping: dict[Any, Any]) -> int:
    try:
        return sum(map(len, mapping))
    except TypeError:  # a key that is not a string, from a Python caller: jsonschema judges it
        return sum(len(key) for key in mapping if key.__class__ is str)


def _too_many_values(path: tuple[str | int, ...], limit: int) -> Excess:
    message = (
        f"inputs hold more than the limit of {limit:,} values (each array, object, string, number, boolean or null)"
    )
    return Excess("values", Issue(message=message, path=input_pointer(path)))


def too_deep(path: tuple[str | int, ...]) -> Excess:
    """Inputs nested deeper than ``MAX_VALIDATED_DEPTH``, at ``path``."""
    message = f"inputs are nested deeper than the limit of {MAX_VALIDATED_DEPTH} levels"
    return Excess("depth", Issue(message=message, path=input_pointer(path)))


def _too_much_text(path: tuple[str | int, ...], limit: int) -> Excess:
    message = f"inputs hold more than the limit of {limit:,} characters of text (strings and keys)"
    return Excess("text", Issue(message=message, path=input_pointer(path)))


def input_pointer(path: tuple[str | int, ...]) -> str:
    """The JSON pointer to an input at ``path``, each key shortened."""
    # Input keys come from callers: a 100,000-character key stays short here.
    return json_pointer(tuple(shorten(p) if isinstance(p, str) else p for p in path))
