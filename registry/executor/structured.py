"""Structured output for a leaf whose parser is ``json``: what the executor
asks the provider for, and the repair rounds of a reply that still fails.

- **Asked for**: every model call of a ``json`` agent that offers no tools
  carries a ``ResponseFormat`` (the ``output_schema``, or none for any JSON
  value; named after the agent), which each adapter turns into what its
  provider has (OpenAI's JSON schema, JSON mode, Anthropic's forced tool).
  A round that offers tools asks for none: a forced output tool or JSON mode
  would stop the model calling the agent's tools.
- **Repair rounds**: a final reply the parser refuses gets up to
  ``output_parser.repair_attempts`` more rounds (default 1, 0 disables
  them): the reply goes back as the assistant's turn and the parse error as
  the user's, as the ReAct loop sends its observations. Each round is a
  model call like any other (the call budget, the journal, the trace);
  after the last one the parse error stands, as it did before. A round is
  made only while the call budget has room: the worst case a composite's
  release check counts leaves repairs out, so that adding them turned no
  valid composite invalid, and a repair never exhausts a run.
"""

from __future__ import annotations

from registry.format.spec import AgentSpec
from registry.providers.chat import ResponseFormat


def response_format(spec: AgentSpec, name: str) -> ResponseFormat | None:
    """What to ask for a call of an agent of ``spec`` named ``name`` (its
    agent name: 1 to 64 of ``a-z0-9_-``, a valid schema or tool name
    everywhere), or None when its parser is not ``json``."""
    parser = spec.output_parser
    if parser is None or parser.type != "json":
        return None
    return ResponseFormat(schema=parser.output_schema, name=name)


def repair_attempts(spec: AgentSpec) -> int:
    """How many repair rounds a refused final reply of ``spec`` gets."""
    parser = spec.output_parser
    return parser.repair_attempts if parser is not None and parser.type == "json" else 0


def repair_request(error: str) -> str:
    """The user turn of a repair round: the parser's error, written for the model, and what to do."""
    return (
        f"{error}\n"
        "Write your whole reply again as JSON that fixes this, with nothing before or after it"
        " (no explanation, no apology)."
    )
