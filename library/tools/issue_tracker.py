"""Tools for the example's assistant/tools_triage: an issue tracker that
knows a few issues, answered from memory.

    prompt-registry run assistant/tools_triage --example --model URL \\
      --tools library.tools.issue_tracker:TOOLS \\
      --input title="Editor crashes when pasting a table" --input body="..."

``--tools MODULE:ATTR`` imports ``MODULE`` from the current directory (run
it from the repository's root) and binds each name of the mapping ``ATTR``
to its callable, which gets the model's arguments as keyword arguments.
"""

from __future__ import annotations

from typing import Any

_ISSUES: dict[int, dict[str, Any]] = {
    101: {
        "title": "Editor freezes when pasting a large table",
        "state": "opened",
        "labels": ["bug", "editor", "performance"],
        "description": "Pasting a table of more than 30 rows from a spreadsheet freezes the editor for a minute,"
        " and sometimes closes the tab.",
    },
    118: {
        "title": "Pasting images from the clipboard uploads them twice",
        "state": "closed",
        "labels": ["bug", "editor"],
        "description": "Fixed in 4.1: the paste handler ran once per clipboard format.",
    },
    140: {
        "title": "Dark mode for the settings page",
        "state": "opened",
        "labels": ["feature", "ui"],
        "description": "The settings page ignores the dark theme that every other page follows.",
    },
    151: {
        "title": "Export to CSV drops the last row",
        "state": "opened",
        "labels": ["bug", "export"],
        "description": "Exporting a table of 10 rows gives a file with 9.",
    },
}


def _words(text: str) -> set[str]:
    return {word.strip(".,:;!?()\"'").lower() for word in text.split() if len(word) >= 4}


def search_issues(query: str, state: str = "all") -> list[dict[str, Any]]:
    """The issues in ``state`` whose title shares a word of four letters or more with ``query``."""
    wanted = _words(query)
    return [
        {"id": number, "title": issue["title"], "state": issue["state"]}
        for number, issue in _ISSUES.items()
        if state in ("all", issue["state"]) and wanted & _words(issue["title"])
    ]


def get_issue(id: int) -> dict[str, Any] | str:  # `id`: the parameter the definition declares
    """One issue's title, description, labels and state."""
    issue = _ISSUES.get(id)
    return {"id": id, **issue} if issue is not None else f"no issue {id}"


TOOLS = {"search_issues": search_issues, "get_issue": get_issue}
