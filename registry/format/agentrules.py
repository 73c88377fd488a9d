"""The rules between a definition's ``type``, ``tools``, ``tool_choice``,
``output_parser``, ``rag`` and ``max_iterations`` that a JSON Schema cannot
say clearly (rule ``agent-type``).

- ``react`` needs ``tools`` and a ReAct parser; ``tool_calling`` needs
  ``tools``; ``rag`` needs ``rag``, which is only for it; ``max_iterations``
  is only for ``react`` and ``tool_calling``.
- ``tool_choice`` is only for ``tool_calling``, the one type that offers its
  tools to the model natively (a ``react`` agent names them in its prompt
  text, where no provider can force a call), and it needs ``tools``; a tool's
  name must be one of them.
- a parser's options belong to its type; an ``output_schema`` is a valid
  JSON Schema; tool names are unique and their ``parameters`` valid schemas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from registry.format.inputschema import InputsSchema, SchemaProblem
from registry.format.safeyaml import JsonPath
from registry.models import Issue, close_matches, did_you_mean, shorten

TOOL_CHOICES = ("auto", "required", "none")
"""The ``tool_choice`` keywords; any other value names a declared tool."""

_MAX_MESSAGE = 300
_PARSER_OPTIONS = {
    "react_json": {"strip_code_fences", "allow_missing_keys"},
    "json": {"output_schema", "repair_attempts"},
}

_Problem = Callable[..., None]
"""Reports one problem: a message, its JSON path and, maybe, a hint."""


def agent_type_issues(definition: dict[str, Any], locate: Callable[..., Issue]) -> list[Issue]:
    """Every problem of the rules above, located by ``locate`` (``definition.locator``)."""
    issues: list[Issue] = []

    def problem(message: str, path: JsonPath, hint: str | None = None) -> None:
        issues.append(locate(message, path, key=True, hint=hint, rule="agent-type"))

    _kind_issues(definition, problem)
    _tool_choice_issues(definition, problem)
    parser = definition.get("output_parser")
    if isinstance(parser, dict) and isinstance(parser.get("type"), str):
        _parser_issues(parser, problem)
    tools = definition.get("tools")
    if isinstance(tools, list):
        _tool_issues(tools, problem)
    return issues


def _kind_issues(definition: dict[str, Any], problem: _Problem) -> None:
    kind = definition.get("type", "vanilla")
    parser = definition.get("output_parser")
    parser_type = parser.get("type") if isinstance(parser, dict) else None
    if kind in ("react", "tool_calling") and not definition.get("tools"):
        problem(f"a {kind} agent needs tools", ("type",), "list the tools under 'tools:'")
    if kind == "react" and parser_type not in ("react_text", "react_json"):
        problem("a react agent needs an output_parser of type react_text or react_json", ("type",))
    if kind == "rag" and "rag" not in definition:
        problem("a rag agent needs rag settings", ("type",), "add 'rag: {retriever: ...}'")
    if "rag" in definition and kind != "rag":
        problem("rag settings are only for type: rag", ("rag",))
    if "max_iterations" in definition and kind not in ("react", "tool_calling"):
        problem("max_iterations is only for type: react or tool_calling", ("max_iterations",))


def _tool_choice_issues(definition: dict[str, Any], problem: _Problem) -> None:
    choice = definition.get("tool_choice")
    if not isinstance(choice, str) or "pattern" in definition:
        return  # absent, not a string, or in a composite: the JSON Schema says so
    kind = definition.get("type", "vanilla")
    tools = definition.get("tools")
    names = [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)] if tools else []
    if not tools:
        problem("tool_choice needs tools to choose from", ("tool_choice",), "declare them under 'tools:'")
    elif kind == "react":
        problem(
            "tool_choice is only for type: tool_calling; a react agent names its tools in its prompt,"
            " so the model is never offered them natively and nothing can force a call",
            ("tool_choice",),
            "remove tool_choice, or make the agent type: tool_calling",
        )
    elif kind != "tool_calling":
        problem(
            f"tool_choice is only for type: tool_calling; a {kind} agent never offers its tools to the model",
            ("tool_choice",),
            "remove tool_choice, or make the agent type: tool_calling",
        )
    elif choice not in TOOL_CHOICES and choice not in names:
        hint = did_you_mean(close_matches(choice, [*TOOL_CHOICES, *names]))
        problem(
            f"tool_choice {shorten(choice)!r} is not auto, required, none or a declared tool ({', '.join(names)})",
            ("tool_choice",),
            hint,
        )


def _parser_issues(parser: dict[str, Any], problem: _Problem) -> None:
    parser_type = parser["type"]
    for option in parser:
        if option != "type" and option not in _PARSER_OPTIONS.get(parser_type, set()):
            problem(f"option {option!r} does not apply to the {parser_type} parser", ("output_parser", option))
    schema = parser.get("output_schema")
    if parser_type == "json" and isinstance(schema, dict):
        try:
            InputsSchema(schema)
        except SchemaProblem as exc:
            problem(
                f"output_schema {shorten(exc.message, _MAX_MESSAGE)}", ("output_parser", "output_schema", *exc.path)
            )


def _tool_issues(tools: list[Any], problem: _Problem) -> None:
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        name = tool.get("name")
        if isinstance(name, str):
            if name in seen:
                problem(f"tool {name!r} is listed twice", ("tools", index, "name"))
            seen.add(name)
        parameters = tool.get("parameters")
        if isinstance(parameters, dict):
            try:
                InputsSchema(parameters)
            except SchemaProblem as exc:
                problem(
                    f"tool parameters {shorten(exc.message, _MAX_MESSAGE)}", ("tools", index, "parameters", *exc.path)
                )
