"""Placeholders: the second phase of rendering, after Jinja.

The seed's prompt format renders Jinja first (tools, files) and leaves
single-brace placeholders for the agent loop: ``Question: {question}``,
``{agent_scratchpad}``. This module finds them in rendered text and fills
them; ``registry.format.definition`` fills those the render's inputs name,
and the executor those it supplies itself (``chat_history``,
``agent_scratchpad``).

What is a placeholder, exactly: ``{``, an ASCII identifier
(``[A-Za-z_][A-Za-z0-9_]*``), ``}``, and

- no brace of the same kind next to it: ``{{name}}``, ``{{name}`` and
  ``{name}}`` are text (Jinja's own delimiters, left in the output by
  ``{% raw %}`` or an expression, stay as written: nothing is unescaped);
- not inside a pair of braces that match: in ``{"q": "{question}"}`` and
  ``function f() { return {x}; }`` the inner braces are JSON or code. Braces
  match as brackets do, each ``}`` closing the nearest open ``{``; a ``{``
  that is never closed encloses nothing, and a ``}`` with nothing open is
  text. Inside braces, a double-quoted string (with JSON's backslash
  escapes) is skipped when braces are paired, so that ``{"a": "}", "b":
  "{x}"}`` is JSON text to its end; outside braces a quote is prose.

So ``{ x }``, ``{0}``, ``{a.b}``, ``{"a": 1}`` and ``{名前}`` are text too.
Only the template's own text makes placeholders: a placeholder's name must
be one that the template's source, or a partial it includes by a literal
name, writes as a placeholder (``written_names``, by the same rules), so
that what a Jinja expression prints (a caller's code snippet, a tool's
description) is searched for those names only. It is a filter on names,
not on positions: printed text that holds one of them is read as a
placeholder too. (Telling printed text from template text by position would
take marking the template's text through Jinja's buffers, where filters and
tests can see it.) A value filled into a placeholder is never searched.

There is no escape: text that must stay ``{name}`` is printed,
``{{ '{name}' }}``, in a template that does not also write ``{name}``.
Finding is one pass over the text, linear in its length, with no
backtracking.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Container, Mapping
from dataclasses import replace
from typing import Any

from jinja2.exceptions import SecurityError

from registry.errors import RenderError
from registry.models import Message, Placeholder, Prompt
from registry.rendering.limits import Budget, RenderLimits

_TOKEN = re.compile(r'[{}"]')
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLOCK_EVERY = 0x1FFF
"""The clock is read once per 8192 braces and quotes: a few milliseconds."""


def find_placeholders(
    text: str, *, message: int = 0, names: Container[str] | None = None, clock: Callable[[], None] | None = None
) -> tuple[Placeholder, ...]:
    """The placeholders of ``text``, in order; with ``names``, only those
    whose name is among them (the rest stay text, and their braces still
    pair up). ``message`` is the index each ``Placeholder`` records;
    ``clock``, when given, is called every few thousand braces (a render's
    deadline: a megabyte of braces takes a second to read)."""
    if "{" not in text:
        return ()
    scan = _Scan(text, message, names, clock)
    consumed = 0
    for token in _TOKEN.finditer(text):
        scan.tick()
        position = token.start()
        if position < consumed:
            continue  # inside a placeholder or a string just read
        char = token.group()
        if char == "}":
            if scan.open_braces:
                scan.open_braces.pop()
        elif char == '"':
            if scan.open_braces:  # a quote in prose is prose
                consumed = scan.string(position)
        else:
            end = _placeholder_end(text, position)
            if end is None:
                scan.open_braces.append(None)
            else:
                scan.found(position, end)
                consumed = end
    return scan.placeholders()


class _Scan:
    """What one pass of ``find_placeholders`` has found so far."""

    def __init__(self, text: str, message: int, names: Container[str] | None, clock: Callable[[], None] | None) -> None:
        self.text = text
        self.message = message
        self.names = names
        self.clock = clock
        self.ticks = 0
        self.outside: list[Placeholder] = []
        self.open_braces: list[list[Placeholder] | None] = []
        """One entry per open ``{``: the placeholders found directly inside
        it (None until there is one), kept only if it is never closed."""

    def tick(self) -> None:
        self.ticks += 1
        if not self.ticks & _CLOCK_EVERY and self.clock is not None:
            self.clock()

    def found(self, start: int, end: int) -> None:
        name = self.text[start + 1 : end - 1]
        if self.names is not None and name not in self.names:
            return
        placeholder = Placeholder(self.message, name, start, end)
        if not self.open_braces:
            self.outside.append(placeholder)
            return
        inside = self.open_braces[-1]
        if inside is None:
            self.open_braces[-1] = [placeholder]
        else:
            inside.append(placeholder)

    def string(self, start: int) -> int:
        """Read the double-quoted string (JSON's, backslash escapes and all)
        that starts at ``start`` inside braces: its braces pair with nothing,
        and its placeholders are inside the braces around it. Returns where
        it ends (the text's end, when it never does)."""
        end = _string_end(self.text, start)
        position = self.text.find("{", start + 1, end)
        while position != -1:
            self.tick()
            found = _placeholder_end(self.text, position)
            if found is not None:
                self.found(position, found)
            position = self.text.find("{", found or position + 1, end)
        return end

    def placeholders(self) -> tuple[Placeholder, ...]:
        # Braces still open enclose nothing. Each was opened after those
        # below it stopped receiving placeholders, so this keeps text order.
        unclosed = [placeholder for inside in self.open_braces if inside for placeholder in inside]
        return (*self.outside, *unclosed)


def _string_end(text: str, start: int) -> int:
    """Just after the quote that closes the string opened at ``start``."""
    position = start + 1
    while True:
        quote = text.find('"', position)
        if quote == -1:
            return len(text)
        escapes = 0
        while text[quote - 1 - escapes] == "\\":
            escapes += 1
        if escapes % 2 == 0:
            return quote + 1
        position = quote + 1


def _placeholder_end(text: str, position: int) -> int | None:
    """Where the placeholder whose ``{`` is at ``position`` ends, or None when
    that ``{`` opens no placeholder."""
    if position > 0 and text[position - 1] == "{":
        return None
    identifier = _IDENTIFIER.match(text, position + 1)
    if identifier is None:
        return None
    close = identifier.end()
    if text[close : close + 1] != "}" or text[close + 1 : close + 2] == "}":
        return None
    return close + 1


def written_names(source: str) -> frozenset[str]:
    """The names a template's source writes as placeholders: those its
    rendered text may hold (inside ``{{ }}``, ``{% %}`` and ``{# #}``
    braces enclose, so expressions, tags and comments write none)."""
    return frozenset(found.name for found in find_placeholders(source))


def placeholder_text(value: Any) -> str:
    """An input's value as a placeholder takes it: a string as it is,
    anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def fill_placeholders(prompt: Prompt, values: Mapping[str, str], *, max_bytes: int | None = None) -> Prompt:
    """``prompt`` with each placeholder ``values`` names replaced by its
    value, as written (a value is never searched for placeholders itself);
    the others are left, at their new offsets. With ``max_bytes``, a
    result longer than that in UTF-8 is a ``RenderError``, found before it
    is built."""
    if not any(found.name in values for found in prompt.placeholders):
        return prompt
    if max_bytes is not None:
        _check_size(prompt, values, max_bytes)
    messages = list(prompt.messages)
    left: list[Placeholder] = []
    for index, message in enumerate(prompt.messages):
        here = [found for found in prompt.placeholders if found.message == index]
        if here:
            content, kept = _filled(message.content, here, values)
            messages[index] = Message(message.role, content)
            left.extend(kept)
    return replace(prompt, messages=tuple(messages), placeholders=tuple(left))


def placeholders_from_inputs(
    prompt: Prompt,
    written: Mapping[str, frozenset[str]],
    inputs: Mapping[str, Any],
    *,
    limits: RenderLimits,
    deadline: float | None = None,
) -> Prompt:
    """The second phase of a render: ``prompt`` (the messages Jinja gave)
    with its placeholders, those each role's template writes (``written``,
    by role), and with those that ``inputs`` name filled
    (``placeholder_text``). Within the render's ``limits``: its output
    bytes, and its clock (``deadline``, as ``render_messages`` takes it);
    a ``RenderError`` past either."""
    budget = Budget(limits, deadline)
    found: list[Placeholder] = []
    for index, message in enumerate(prompt.messages):
        names = written.get(message.role)
        if names:
            try:
                found += find_placeholders(message.content, message=index, names=names, clock=budget.check_time)
            except SecurityError as exc:  # the clock's
                raise RenderError(f"{message.role} template: {exc}", role=message.role) from exc
    values = {p.name: placeholder_text(inputs[p.name]) for p in found if p.name in inputs}
    return fill_placeholders(replace(prompt, placeholders=tuple(found)), values, max_bytes=limits.max_output_bytes)


def _filled(text: str, placeholders: list[Placeholder], values: Mapping[str, str]) -> tuple[str, list[Placeholder]]:
    pieces: list[str] = []
    kept: list[Placeholder] = []
    cursor = shift = 0
    for found in placeholders:
        value = values.get(found.name)
        if value is None:
            kept.append(replace(found, start=found.start + shift, end=found.end + shift))
            continue
        pieces += (text[cursor : found.start], value)
        cursor = found.end
        shift += len(value) - (found.end - found.start)
    pieces.append(text[cursor:])
    return "".join(pieces), kept


def _check_size(prompt: Prompt, values: Mapping[str, str], max_bytes: int) -> None:
    # A value filled in many times over could make a prompt of gigabytes
    # from a request of one megabyte: add up the bytes first.
    sizes = {name: len(value.encode("utf-8")) for name, value in values.items()}
    total = sum(len(message.content.encode("utf-8")) for message in prompt.messages)
    for found in prompt.placeholders:
        if found.name in sizes:
            total += sizes[found.name] - (found.end - found.start)  # a placeholder is ASCII: a byte a character
    if total > max_bytes:
        raise RenderError(f"rendered output exceeds {max_bytes} bytes once its placeholders are filled")
