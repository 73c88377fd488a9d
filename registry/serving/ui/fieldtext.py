"""What the text of a playground field reads as: a whole number, a number,
a list of strings one a line, or JSON as render inputs can hold it (no NaN
or infinities, no number longer than ``NUMBER_CHARS`` characters). Each
raises ``Unreadable``, whose message says why, for text that does not."""

from __future__ import annotations

import json
import math
import re
from typing import Any

NUMBER_CHARS = 100
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Unreadable(Exception):
    """A submitted text that does not read as its field's kind; the message says why."""


def read_integer(text: str) -> int:
    number = text.strip()
    if len(number) > NUMBER_CHARS:
        raise Unreadable("too many digits for a number")
    if not _INTEGER.fullmatch(number):
        raise Unreadable(f"{number!r} is not a whole number")
    return int(number)


def read_number(text: str) -> int | float:
    number = text.strip()
    if len(number) > NUMBER_CHARS:
        raise Unreadable("too many digits for a number")
    if _INTEGER.fullmatch(number):
        return int(number)
    if not _NUMBER.fullmatch(number):
        raise Unreadable(f"{number!r} is not a number")
    value = float(number)
    if not math.isfinite(value):
        raise Unreadable(f"{number!r} is out of range")
    return value


def read_lines(text: str) -> list[str]:
    """A list of strings from a textarea: a JSON array of strings as such, else one item a non-blank line."""
    text = text.replace("\r\n", "\n")
    if text.lstrip().startswith("["):
        try:
            items = parse_json(text)
        except Unreadable:
            items = None
        if isinstance(items, list) and all(isinstance(item, str) for item in items):
            return items
    return [line for line in text.split("\n") if line.strip()]


def parse_json(text: str) -> Any:
    """JSON as the inputs can hold it: no NaN or infinities, numbers of at most ``NUMBER_CHARS`` characters."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_json_float, parse_int=_json_int)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    except RecursionError as exc:
        raise Unreadable("not valid JSON: nested too deeply") from exc
    except ValueError as exc:
        raise Unreadable(f"not valid JSON: {exc}") from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _json_float(text: str) -> float:
    if len(text) > NUMBER_CHARS:
        raise ValueError("a number has too many digits")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _json_int(text: str) -> int:
    # Python refuses past 4300 digits itself, but slowly and in words about its own settings.
    if len(text) > NUMBER_CHARS:
        raise ValueError("a number has too many digits")
    return int(text)
