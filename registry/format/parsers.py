"""Output parsers: the model's text to a tool call, a final answer, or a
parse error the executor can send back. Shared by the client, the server and
the CLI, so the three give the same result for the same text.

Every parser returns exactly one of ``ToolCall``, ``FinalAnswer`` or
``ParseError``; it never raises on the model's text. A ``ParseError`` has a
stable ``reason`` and an ``observation``: a message written for the model,
telling it what to do differently.

- ``react_text``: ``Thought:`` / ``Action:`` / ``Action Input:`` /
  ``Final Answer:`` lines (markers count at the start of a line only). An
  Action Input starting with ``{`` or ``[`` must be a JSON object; one that is
  exactly a JSON string (``"SF weather"``) is the text it decodes to; anything
  else, an unclosed quote included, is plain text taken as written. Text goes
  to the tool's one required parameter (or its only one, or ``input``).
- ``react_json``: ``{"thought", "action": {"tool_name", "tool_params":
  [{"name", "value"}]} | null, "answer": ... | null}``.
- ``json``: the whole output (optionally in a code fence) as JSON, checked
  against ``output_schema``.
- ``text``: always a ``FinalAnswer``.

Arguments of a tool call are checked against the tool's ``parameters``
schema; a mismatch is a ``ParseError`` saying what was wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.format.inputschema import InputsSchema, SchemaProblem
from registry.models import shorten


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    thought: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "tool_call", "name": self.name, "arguments": self.arguments, "thought": self.thought}


@dataclass(frozen=True)
class FinalAnswer:
    text: str
    thought: str | None = None
    data: Any = None
    """For the ``json`` parser: the parsed value."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "final_answer", "text": self.text, "thought": self.thought}
        if self.data is not None:
            out["data"] = self.data
        return out


@dataclass(frozen=True)
class ParseError:
    reason: str
    """A stable id: ``no_action_or_answer``, ``unknown_tool``, ``invalid_arguments``, ..."""
    observation: str
    """What to tell the model so that it corrects itself."""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "parse_error", "reason": self.reason, "observation": self.observation}


ParseResult = ToolCall | FinalAnswer | ParseError

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```\s*$", re.DOTALL)
_MARKER = re.compile(r"^[ \t]*(Thought|Action Input|Action|Observation|Final Answer)[ \t]*:[ \t]?(.*)$", re.IGNORECASE)
# Models write tool names as `search`, "search" or **search**.
_NAME_DECORATION = "`'\"* "


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: InputsSchema | None

    @property
    def text_parameter(self) -> str:
        """Where a plain-text Action Input goes."""
        schema = self.parameters.schema if self.parameters else {}
        required = schema.get("required")
        if isinstance(required, list) and len(required) == 1 and isinstance(required[0], str):
            return required[0]
        properties = schema.get("properties")
        if isinstance(properties, dict) and len(properties) == 1:
            return str(next(iter(properties)))
        return "input"


@dataclass(frozen=True)
class OutputParser:
    """A parser configured from a definition's ``output_parser`` and ``tools``."""

    type: str
    tools: Mapping[str, Tool] = field(default_factory=dict)
    strip_code_fences: bool = False
    allow_missing_keys: bool = False
    output_schema: InputsSchema | None = None

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any]) -> OutputParser:
        """The definition's parser (``text`` when it declares none). The
        definition is valid: ``compile_definition`` checked the options."""
        spec = definition.get("output_parser") or {"type": "text"}
        tools = {}
        for tool in definition.get("tools") or []:
            tools[tool["name"]] = Tool(tool["name"], _schema_or_none(tool.get("parameters")))
        return cls(
            type=spec["type"],
            tools=tools,
            strip_code_fences=bool(spec.get("strip_code_fences", False)),
            allow_missing_keys=bool(spec.get("allow_missing_keys", False)),
            output_schema=_schema_or_none(spec.get("output_schema")),
        )

    def parse(self, output: str) -> ParseResult:
        if not isinstance(output, str):
            return ParseError("not_text", "The output must be text.")
        if self.type == "react_text":
            return self._react_text(output)
        if self.type == "react_json":
            return self._react_json(output)
        if self.type == "json":
            return self._json(output)
        return FinalAnswer(output)

    # -- react_text ----------------------------------------------------------

    def _react_text(self, output: str) -> ParseResult:
        preamble: list[str] = []
        sections: list[tuple[str, list[str]]] = []
        for line in output.replace("\r\n", "\n").split("\n"):
            match = _MARKER.match(line)
            if match:
                sections.append((match.group(1).lower(), [match.group(2)]))
            elif sections:
                sections[-1][1].append(line)
            else:
                preamble.append(line)
        texts = {kind: [("\n".join(lines)).strip() for k, lines in sections if k == kind] for kind, _ in sections}
        thought = _joined(texts.get("thought")) or ("\n".join(preamble).strip() or None)
        actions, inputs = texts.get("action", []), texts.get("action input", [])
        finals, observations = texts.get("final answer", []), texts.get("observation", [])
        if len(actions) > 1 or len(inputs) > 1:
            return ParseError(
                "several_actions",
                "You gave several actions at once. Give exactly one Action and its Action Input, then stop and"
                " wait for the Observation.",
            )
        if actions and finals:
            return ParseError(
                "action_and_final_answer",
                "You gave both an Action and a Final Answer. Either call one tool (Action and Action Input), or"
                " give the Final Answer, not both.",
            )
        if observations:
            return ParseError(
                "invented_observation",
                "Do not write the Observation yourself. Stop after the Action Input; the Observation will be"
                " given to you.",
            )
        if actions:
            name = actions[0].split("\n", 1)[0].strip(_NAME_DECORATION)
            if not inputs:
                return ParseError(
                    "missing_action_input",
                    f"The Action {shorten(name, 60)!r} has no Action Input. Give the tool's input as a JSON object"
                    " on an 'Action Input:' line.",
                )
            known = self._known_tool(name)
            if isinstance(known, ParseError):
                return known
            arguments = self._text_arguments(known, inputs[0])
            if isinstance(arguments, ParseError):
                return arguments
            return self._checked_call(known, arguments, thought)
        if inputs:
            return ParseError(
                "missing_action", "You gave an Action Input without an Action. Name the tool on an 'Action:' line."
            )
        if finals:
            return FinalAnswer(finals[0], thought)
        return ParseError(
            "no_action_or_answer",
            "Your reply had neither an Action nor a Final Answer. Reply with 'Action:' and 'Action Input:' to use a"
            " tool, or 'Final Answer:' to answer.",
        )

    def _text_arguments(self, tool: Tool, text: str) -> dict[str, Any] | ParseError:
        body = _unfenced(text).strip()
        if body[:1] in ("{", "["):
            try:
                value = _loads(body)
            except ValueError as exc:
                return ParseError(
                    "invalid_action_input",
                    f"The Action Input is not valid JSON ({_json_problem(exc)}). Give it as one JSON object.",
                )
            if isinstance(value, dict):
                return value
            return ParseError(
                "invalid_action_input", "The Action Input must be a JSON object of the tool's parameters."
            )
        if body[:1] == '"':
            # Models quote a text input as a JSON string: the text is what it
            # decodes to. A quote that does not make one JSON string is prose.
            try:
                value = _loads(body)
            except json.JSONDecodeError:
                value = None
            except ValueError as exc:
                return ParseError("invalid_action_input", f"The Action Input is not valid JSON ({exc}).")
            if isinstance(value, str):
                body = value
        # Plain text: the tool's one required parameter, or its only one, or "input".
        return {tool.text_parameter: body}

    # -- react_json ----------------------------------------------------------

    def _react_json(self, output: str) -> ParseResult:
        text = output.strip()
        if self.strip_code_fences:
            text = _unfenced(text).strip()
        try:
            value = _loads(text)
        except ValueError as exc:
            hint = " Reply with the JSON object alone, without a code fence." if text.startswith("```") else ""
            return ParseError(
                "invalid_json",
                f"Your reply is not one valid JSON object ({_json_problem(exc)}).{hint} Reply with exactly"
                ' {"thought": ..., "action": ..., "answer": ...} and nothing else.',
            )
        if not isinstance(value, dict):
            return ParseError("invalid_json", 'Your reply must be a JSON object {"thought", "action", "answer"}.')
        missing = [key for key in ("thought", "action", "answer") if key not in value]
        if missing and not self.allow_missing_keys:
            return ParseError(
                "missing_keys",
                f"Your reply lacks {', '.join(repr(k) for k in missing)}; give each key, null if unused.",
            )
        thought, action, answer = value.get("thought"), value.get("action"), value.get("answer")
        if thought is not None and not isinstance(thought, str):
            return ParseError("invalid_thought", "'thought' must be a string.")
        if action is not None and answer is not None:
            if not self.allow_missing_keys:
                return ParseError(
                    "action_and_answer",
                    "You gave both an action and an answer. Set 'answer' to null to call a tool, or 'action' to"
                    " null to answer.",
                )
        if action is not None:
            return self._json_action(action, thought)
        if answer is not None:
            if not isinstance(answer, str):
                return ParseError("invalid_answer", "'answer' must be a string.")
            return FinalAnswer(answer, thought)
        return ParseError(
            "no_action_or_answer",
            "Your reply had neither an action nor an answer. Give one of them; set the other to null.",
        )

    def _json_action(self, action: Any, thought: str | None) -> ParseResult:
        if not isinstance(action, dict) or not isinstance(action.get("tool_name"), str):
            return ParseError(
                "invalid_action",
                '\'action\' must be {"tool_name": "...", "tool_params": [{"name": ..., "value": ...}]}.',
            )
        known = self._known_tool(action["tool_name"])
        if isinstance(known, ParseError):
            return known
        params = action.get("tool_params")
        if params is None:
            params = []
        if not isinstance(params, list):
            return ParseError("invalid_action", '\'tool_params\' must be a list of {"name": ..., "value": ...}.')
        arguments: dict[str, Any] = {}
        for param in params:
            if not isinstance(param, dict) or not isinstance(param.get("name"), str) or "value" not in param:
                return ParseError("invalid_action", 'Each tool parameter must be {"name": "...", "value": ...}.')
            if param["name"] in arguments:
                return ParseError(
                    "duplicate_parameter", f"The parameter {shorten(param['name'], 60)!r} is given twice; give it once."
                )
            arguments[param["name"]] = param["value"]
        return self._checked_call(known, arguments, thought)

    # -- json ----------------------------------------------------------------

    def _json(self, output: str) -> ParseResult:
        text = _unfenced(output.strip()).strip()
        try:
            value = _loads(text)
        except ValueError as exc:
            return ParseError(
                "invalid_json", f"Your reply is not valid JSON ({_json_problem(exc)}). Reply with JSON only."
            )
        if self.output_schema is not None:
            issues = self.output_schema.issues(value)
            if issues:
                listed = "; ".join(f"{i.path or '/'}: {i.message}" for i in issues[:10])
                return ParseError("schema_mismatch", f"Your JSON does not fit the required schema: {listed}.")
        return FinalAnswer(text, data=value)

    # -- shared --------------------------------------------------------------

    def _known_tool(self, name: str) -> Tool | ParseError:
        tool = self.tools.get(name)
        if tool is None:
            available = ", ".join(self.tools) or "none"
            return ParseError(
                "unknown_tool", f"There is no tool named {shorten(name, 60)!r}. Available tools: {available}."
            )
        return tool

    def _checked_call(self, tool: Tool, arguments: dict[str, Any], thought: str | None) -> ParseResult:
        if tool.parameters is not None:
            issues = tool.parameters.issues(arguments)
            if issues:
                listed = "; ".join(f"{i.path or '/'}: {i.message}" for i in issues[:10])
                return ParseError(
                    "invalid_arguments", f"The arguments for {tool.name!r} do not fit its parameters: {listed}."
                )
        return ToolCall(tool.name, arguments, thought)


def _schema_or_none(schema: Any) -> InputsSchema | None:
    if not isinstance(schema, dict):
        return None
    try:
        return InputsSchema(schema)
    except SchemaProblem:
        return None  # compile_definition reports it; a parser never raises


def _unfenced(text: str) -> str:
    match = _FENCE.match(text)
    return match.group(1) if match else text


def _joined(texts: list[str] | None) -> str | None:
    return "\n".join(t for t in texts if t) or None if texts else None


# Escapes that may decode to a lone surrogate: only then is a value walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _loads(text: str) -> Any:
    """``json.loads``, also raising ``ValueError`` for JSON nested past
    Python's recursion limit and for ``\\ud800``-``\\udfff`` escapes that
    decode to a lone surrogate, which no UTF-8 text (a tool's argument, an
    HTTP answer) can hold."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text) and _holds_surrogate(value):
        raise ValueError("an unpaired surrogate, a \\ud800-\\udfff escape")
    return value


def _holds_surrogate(value: Any) -> bool:
    """Whether a string anywhere in decoded JSON, a key included, is not valid Unicode."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _json_problem(exc: ValueError) -> str:
    """What the decoder found wrong, without where (the model sees one reply,
    and ``Expecting ':' delimiter`` must keep its own colon)."""
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
