"""A word diff of two outputs, for the HTML report: what base said that head
does not (deleted) and what head says that base did not (inserted).

Texts are split into words and runs of punctuation, each with the white
space before it, and compared by ``difflib.SequenceMatcher``. Its cost grows with the
product of the lengths, so only the first ``MAX_TOKENS`` tokens of each
side are compared: the rest is shown as it is, and the diff says it was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

MAX_TOKENS = 1_000
# A word or a run of punctuation with the white space before it: a change of
# three words is one deletion, not three with spaces kept between them.
_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]+|\s+")

PieceKind = Literal["same", "deleted", "inserted", "uncompared"]


@dataclass(frozen=True)
class Piece:
    """A stretch of one side's text, and how it differs from the other side's."""

    text: str
    kind: PieceKind


@dataclass(frozen=True)
class WordDiff:
    """Each side's text in pieces: base's with what head left out, head's with what it added."""

    base: tuple[Piece, ...]
    head: tuple[Piece, ...]
    cut: bool
    """Whether a side was longer than ``MAX_TOKENS`` tokens, its rest not compared."""


def word_diff(before: str, after: str, *, max_tokens: int = MAX_TOKENS) -> WordDiff:
    """The pieces of ``before`` and ``after``, marked where they differ word by word."""
    if before == after:  # most cases that did not change: nothing to compare
        return WordDiff((Piece(before, "same"),), (Piece(after, "same"),), cut=False)
    old, new = _TOKEN.findall(before), _TOKEN.findall(after)
    compared_old, compared_new = old[:max_tokens], new[:max_tokens]
    base: list[Piece] = []
    head: list[Piece] = []
    matcher = SequenceMatcher(None, compared_old, compared_new)
    for tag, old_from, old_to, new_from, new_to in matcher.get_opcodes():
        if tag == "equal":
            base.append(Piece("".join(compared_old[old_from:old_to]), "same"))
            head.append(Piece("".join(compared_new[new_from:new_to]), "same"))
            continue
        if old_to > old_from:
            base.append(Piece("".join(compared_old[old_from:old_to]), "deleted"))
        if new_to > new_from:
            head.append(Piece("".join(compared_new[new_from:new_to]), "inserted"))
    if len(old) > max_tokens:
        base.append(Piece("".join(old[max_tokens:]), "uncompared"))
    if len(new) > max_tokens:
        head.append(Piece("".join(new[max_tokens:]), "uncompared"))
    return WordDiff(tuple(base), tuple(head), cut=len(old) > max_tokens or len(new) > max_tokens)
