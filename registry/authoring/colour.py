"""Colour for the reports authors read on a terminal: one table of ANSI
styles for lint, test and diff."""

from __future__ import annotations

_STYLES = {
    "bold": "\033[1m",
    "dim": "\033[2m",
    "added": "\033[32m",
    "removed": "\033[31m",
    "hunk": "\033[36m",
    "error": "\033[31m",
    "warning": "\033[33m",
}
_RESET = "\033[0m"


def paint(text: str, style: str, *, colour: bool) -> str:
    """``text`` in ``style`` (a key of the table above) when ``colour``."""
    return f"{_STYLES[style]}{text}{_RESET}" if colour else text
