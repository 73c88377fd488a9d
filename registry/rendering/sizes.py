"""Size estimates: how much a value prints as, or an operation would make,
known before it is made.

The guard refuses an operation by what it would produce, not by what it
did: a string repeated a million times, a nested list that shares one large
part, a format with a huge width. ``approx_size`` measures a value as it
would print (shared parts counted every time they appear); ``estimate``
says what a memory-multiplying filter or ``str`` method would produce from
its arguments; the ``check_*`` functions refuse, with a ``SecurityError``
saying what and how much, whatever would pass one value's limit.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView, KeysView, Mapping, Sequence, ValuesView
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.utils import Namespace

from registry.rendering.jinja_internals import TemplateModule, namespace_attributes
from registry.rendering.limits import RenderLimits

_WIDE_FORMAT = re.compile(r"\d{7,}")  # a width or precision of a million or more
_NESTED_FORMAT_FIELD = re.compile(r"\{[^{}]*:[^{}]*\{")  # '{0:>{1}}': a width taken from an argument


def approx_size(value: Any, limit: int) -> int:
    """About how many characters ``value`` prints as, counting shared parts
    every time they appear; stops counting once past ``limit``."""
    total = 0
    pending = [value]
    pop, extend = pending.pop, pending.extend
    while pending and total <= limit:
        item = pop()
        # The classes JSON inputs are made of first, by identity (a filter's
        # guard measures its value on every call); anything else, subclasses
        # included, takes the general branches below, which give the same sizes.
        kind = item.__class__
        if kind is str:
            total += len(item) + 2
        elif kind is dict:
            total += 2 + 4 * len(item)
            extend(item.keys())
            extend(item.values())
        elif kind is list or kind is tuple:
            total += 2 + 2 * len(item)
            extend(item)
        elif kind is int or kind is bool:
            total += item.bit_length() // 3 + 1
        elif kind is float or item is None:
            total += 8
        else:
            total += _approx_size_of_other(item, pending)
    return total


def _approx_size_of_other(item: Any, pending: list[Any]) -> int:
    """``approx_size``'s share for one value of any other class; what it holds
    goes on ``pending``."""
    if isinstance(item, (str, bytes)):
        return len(item) + 2
    if isinstance(item, dict):
        pending.extend(item.keys())
        pending.extend(item.values())
        return 2 + 4 * len(item)
    if isinstance(item, (list, tuple, set, frozenset, KeysView, ValuesView, ItemsView)):
        pending.extend(item)
        return 2 + 2 * len(item)
    if isinstance(item, Namespace):  # prints its attributes like a dict
        pending.append(namespace_attributes(item))
        return 0
    if isinstance(item, int):
        return item.bit_length() // 3 + 1  # ints may have 65,536 bits: about 20,000 digits
    if isinstance(item, range):
        return 2 + 10 * len(item)
    if isinstance(item, TemplateModule) and hasattr(item, "_registry_output"):
        return int(item._registry_output.size)
    return 8


def check_chars(size: int, limits: RenderLimits, what: str) -> None:
    """Refuse ``size`` characters when they pass one value's limit."""
    if size > limits.max_value_chars:
        raise SecurityError(f"{what} would produce about {size} characters; the limit is {limits.max_value_chars}")


def check_measured(value: Any, limits: RenderLimits, what: str) -> None:
    """Refuse ``value`` when it would print longer than one value may."""
    check_chars(approx_size(value, limits.max_value_chars), limits, what)


def check_result(value: Any, limits: RenderLimits, what: str) -> Any:
    """``value``, once measured: refused when it is larger than one value may be."""
    if isinstance(value, (str, bytes)):
        check_chars(len(value), limits, what)
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        # Measured through: dict.fromkeys(keys, shared) is small by length only.
        check_measured(value, limits, what)
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64 * 1024:
        raise SecurityError(f"{what} produced an integer of {value.bit_length()} bits")
    return value


def _int_arg(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class Arguments:
    """Positional-or-keyword access to the arguments of a filter or method."""

    def __init__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        self.args, self.kwargs = args, kwargs

    def get(self, index: int, name: str, default: Any) -> Any:
        return self.args[index] if len(self.args) > index else self.kwargs.get(name, default)


def estimate(kind: str, value: Any, arguments: Arguments, limit: int) -> int:
    """About how many characters a memory-multiplying filter or str method
    would produce, computed before it runs."""
    text = value if isinstance(value, str) else ""
    size = len(text) if isinstance(value, str) else approx_size(value, limit)
    if kind in ("center", "ljust", "rjust", "zfill"):
        return max(_int_arg(arguments.get(0, "width", 80)), size)
    if kind == "indent":
        width = arguments.get(0, "width", 4)
        prefix = len(width) if isinstance(width, str) else _int_arg(width)
        return size + prefix * (text.count("\n") + 1)
    if kind == "expandtabs":
        return size + text.count("\t") * _int_arg(arguments.get(0, "tabsize", 8))
    if kind == "replace":
        old, new = str(arguments.get(0, "old", "")), str(arguments.get(1, "new", ""))
        return size + (text.count(old) if old else size + 1) * len(new)
    if kind == "wordwrap":
        width = max(_int_arg(arguments.get(0, "width", 79)), 1)
        wrap = arguments.get(2, "wrapstring", None)
        return size + len(str(wrap) if wrap is not None else "\n") * (size // width + 1)
    if kind == "tojson":
        return size * (_int_arg(arguments.get(0, "indent", 0)) + 1)
    if kind == "translate":
        table = arguments.get(0, "table", {})
        longest = (
            max((len(v) for v in table.values() if isinstance(v, str)), default=1) if isinstance(table, dict) else 1
        )
        return size * max(longest, 1)
    if kind in ("batch", "slice"):
        return size + _int_arg(arguments.get(0, "linecount", 0))
    return size


def joined(value: Any, separator: Any, limits: RenderLimits, what: str) -> list[Any]:
    """The items of a join, materialised and measured before joining."""
    items = list(value) if value is not None else []
    size = len(str(separator)) * len(items)
    check_chars(size, limits, what)
    check_chars(size + approx_size(items, limits.max_value_chars - size), limits, what)
    return items


def check_format(template: str, arguments: Sequence[Any], limits: RenderLimits) -> None:
    """Refuse %-style and str.format templates that would need huge memory:
    wide literal widths, widths taken from arguments, and many references to
    large arguments."""
    if _WIDE_FORMAT.search(template):
        raise SecurityError("format widths of a million or more are not allowed")
    if _NESTED_FORMAT_FIELD.search(template):
        raise SecurityError("format specifications taken from arguments are not allowed")
    if "*" in template and any(abs(_int_arg(v)) > limits.max_value_chars for v in arguments):
        raise SecurityError("a format width taken from an argument must stay under the render limit")
    references = template.count("{") + template.count("%") + 1
    size = len(template) + references * approx_size(list(arguments), limits.max_value_chars // references)
    check_chars(size, limits, "formatting")


def check_bits(bits: int) -> None:
    """Refuse an integer of ``bits`` bits when it is too large to print quickly."""
    if bits > 64 * 1024:
        raise SecurityError(f"an integer of about {bits} bits is not allowed")
