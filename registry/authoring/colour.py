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


def diff_lines(text: str, *, colour: bool = False) -> list[str]:
    """The lines of a unified diff; with ``colour``, as git colours them:
    file headers bold, hunk headers cyan, added lines green, removed red."""
    lines = []
    for line in text.rstrip("\n").splitlines():
        if line.startswith(("--- ", "+++ ")):
            style = "bold"
        elif line.startswith("@@"):
            style = "hunk"
        elif line.startswith("+"):
            style = "added"
        elif line.startswith("-"):
            style = "removed"
        else:
            lines.append(line)
            continue
        lines.append(paint(line, style, colour=colour))
    return lines
