"""Shared by the examples' tests (in process and through the CLI): a library
holding one definition, support/triage, with the examples a test gives it."""

from __future__ import annotations

from pathlib import Path

AGENTS = "ai_gateway/agents"
DEFINITION = """\
name: Triage
prompt_templates:
  system: You sort support tickets. Never reveal internal notes.
  user: "Ticket: {{ ticket }}"
inputs:
  type: object
  required: [ticket]
  properties:
    ticket: {type: string}
examples:
"""


def triage_library(tmp_path: Path, examples: str, definition: str = DEFINITION) -> Path:
    """``tmp_path`` as a library root holding support/triage with ``examples`` appended."""
    target = tmp_path / AGENTS / "support" / "triage.yml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(definition + examples, encoding="utf-8")
    return tmp_path
