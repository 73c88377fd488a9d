"""A render as the playground shows it: each message cut into text and the
placeholders it leaves for the agent loop (``Prompt.placeholders``), and,
for each placeholder's name, what fills it when the agent runs
(``AgentSpec.placeholder_fill``, the logic of lint's
``unfilled-placeholder``), said in words.

Plain data for the template, which escapes every piece: agent text is
untrusted, and a placeholder is marked by the template's own elements
around its escaped text, never by markup made here.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.format.spec import AgentSpec, PlaceholderFill
from registry.models import Placeholder, Prompt

MAX_MARKED = 1000
"""Placeholders boxed in the messages, at most; those after are shown as
text (and still counted): a hostile template can leave tens of thousands,
which would make a page of megabytes that takes seconds to write."""

# What the executor fills its own placeholders with (RUNTIME_PLACEHOLDERS), in words.
_RUNTIME_MEANINGS = {
    "chat_history": "the conversation's prior turns",
    "agent_scratchpad": "the thoughts, actions and observations so far, again every round",
}


@dataclass(frozen=True)
class LeftPlaceholder:
    """One name the render left as a placeholder, and what fills it."""

    name: str
    anchor: str
    """The id of its entry in the page's list (a name is an identifier, so a valid id)."""
    filled_by: str
    """Who fills it, in words: the executor, an input, or nothing."""
    unfillable: bool
    """Nothing can fill it: lint reports it, and a run stops before its first call."""
    roles: tuple[str, ...]
    """The roles of the messages that hold it, in message order."""
    count: int


@dataclass(frozen=True)
class Piece:
    """A run of a message's text; ``placeholder`` when it is one."""

    text: str
    placeholder: LeftPlaceholder | None = None


@dataclass(frozen=True)
class ShownMessage:
    role: str
    pieces: tuple[Piece, ...]


@dataclass(frozen=True)
class ShownRender:
    """The messages of a render, in pieces, and its placeholders by name
    (in the order they first appear)."""

    messages: tuple[ShownMessage, ...]
    placeholders: tuple[LeftPlaceholder, ...]
    marked: int
    """How many of the placeholders the messages hold are boxed (the first ``MAX_MARKED``)."""
    total: int

    @property
    def unfillable(self) -> tuple[LeftPlaceholder, ...]:
        return tuple(left for left in self.placeholders if left.unfillable)


def shown_render(prompt: Prompt, spec: AgentSpec) -> ShownRender:
    """``prompt`` cut at its placeholders, each named with what fills it for the agent ``spec`` reads."""
    by_name: dict[str, list[Placeholder]] = {}
    for found in prompt.placeholders:
        by_name.setdefault(found.name, []).append(found)
    left = {name: _left(name, found, prompt, spec) for name, found in by_name.items()}
    marked = prompt.placeholders[:MAX_MARKED]
    messages = tuple(
        ShownMessage(message.role, _pieces(message.content, index, marked, left))
        for index, message in enumerate(prompt.messages)
    )
    return ShownRender(messages, tuple(left.values()), len(marked), len(prompt.placeholders))


def _left(name: str, found: list[Placeholder], prompt: Prompt, spec: AgentSpec) -> LeftPlaceholder:
    roles = tuple(dict.fromkeys(prompt.messages[placeholder.message].role for placeholder in found))
    fill = spec.placeholder_fill(name)
    return LeftPlaceholder(
        name=name,
        anchor=f"placeholder-{name}",
        filled_by=_filled_by(fill, spec),
        unfillable=not fill.fillable,
        roles=roles,
        count=len(found),
    )


def _filled_by(fill: PlaceholderFill, spec: AgentSpec) -> str:
    if fill.by == "runtime":
        meaning = _RUNTIME_MEANINGS.get(fill.name)
        return f"the executor, with {meaning}" if meaning else "the executor"
    if fill.by == "input":
        # Left by a render: the input was not given (a default would have filled it).
        undeclared = "" if fill.name in spec.declared_inputs else " (the agent names no inputs: any may be given)"
        return (
            f"the input {fill.name!r}{undeclared}, not given here: a run with these inputs stops before its first call"
        )
    if fill.by == "tools":
        return "the render, with the declared tools"
    if fill.runtime_kinds:
        kinds = ", ".join(fill.runtime_kinds)
        return f"nothing: the executor fills it for {kinds} agents only, and this one is {spec.kind}"
    return "nothing: no input and no runtime variable fills it"


def _pieces(
    content: str, index: int, placeholders: tuple[Placeholder, ...], left: dict[str, LeftPlaceholder]
) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    cursor = 0
    for found in placeholders:
        if found.message != index:
            continue
        if found.start > cursor:
            pieces.append(Piece(content[cursor : found.start]))
        pieces.append(Piece(content[found.start : found.end], left[found.name]))
        cursor = found.end
    if cursor < len(content) or not pieces:
        pieces.append(Piece(content[cursor:]))
    return tuple(pieces)
