"""Agent definitions: validating one and compiling it into something that renders.

Shared by the server and the client. The input is a definition already read
into JSON-compatible data (the server reads YAML with ``registry.format.safeyaml``;
the client receives JSON); positions, when known, turn JSON paths into file
lines. ``compile_definition`` reports every problem at once:

- the JSON Schema (``schemas/agent-definition.v1.schema.json``), with a
  "did you mean" hint for misspelt keys;
- every template compiles in the sandbox (``registry.rendering``);
- every include, import and extends with a literal name exists in the same
  release, and the partials it names compile;
- when ``inputs`` is declared: it is a valid JSON Schema, and every variable
  any template needs (through includes too) is declared in it.

The digest of a definition covers its bytes, the bytes of every partial it
can reach and the rendering semantics: equal digests render identically.

Rendering takes inputs from callers: before any schema work they are measured
against the input budget of the ``RenderLimits`` (values, nesting, text;
``registry.format.inputbudget.measure``), and validating them and rendering
share one clock.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from registry.errors import InvalidDefinition, InvalidInputs, InvalidRequest, NotAPrompt, PayloadTooLarge, summarize
from registry.format.agentrules import agent_type_issues
from registry.format.composite import Pattern, read_pattern
from registry.format.composite_local import local_issues
from registry.format.inputbudget import measure
from registry.format.inputschema import Deadline, InputsSchema, SchemaProblem
from registry.format.parsers import OutputParser
from registry.format.safeyaml import JsonPath, YamlDocument
from registry.format.spec import AgentSpec
from registry.models import Issue, Message, Prompt, close_matches, did_you_mean, json_pointer, shorten
from registry.rendering import (
    RENDER_SEMANTICS,
    CompiledTemplate,
    RenderLimits,
    TemplateCompileError,
    TemplateEnvironment,
    TemplateNotFound,
    analyse_partial,
    normalize_include_name,
    partial_placeholders,
    placeholders_from_inputs,
    render_messages,
    written_names,
)

# registry/schemas links to the top-level schemas/, so that an installed
# package (a gateway installing only the client) carries the schema too.
SCHEMA_FILE = Path(__file__).parent.parent / "schemas" / "agent-definition.v1.schema.json"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
"""A usecase or an agent name: ``ai_gateway/agents/<usecase>/<name>.yml``."""

# The extension keys on a tool that the executor reads; any other ``x-`` key
# is served as written, for the operator's own tooling.
TOOL_EXTENSIONS = ("x-requires-approval",)
_MAX_MESSAGE = 300


@cache
def definition_schema() -> dict[str, Any]:
    """The published JSON Schema of the definition format."""
    with SCHEMA_FILE.open(encoding="utf-8") as handle:
        schema: dict[str, Any] = json.load(handle)
    return schema


@cache
def _definition_validator() -> Draft202012Validator:
    return Draft202012Validator(definition_schema())


@cache
def content_format() -> str:
    """Changes whenever what a definition means could: its schema or the
    rendering semantics. Stored records are keyed by it (the shared cache
    tier), so a registry never reads another format's records."""
    digest = hashlib.sha256(SCHEMA_FILE.read_bytes())
    digest.update(RENDER_SEMANTICS.encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class CompiledAgent:
    """A valid definition with its templates compiled, ready to render."""

    definition: dict[str, Any]
    templates: tuple[tuple[str, CompiledTemplate], ...]
    partials: tuple[str, ...]
    dynamic_includes: bool
    inputs: InputsSchema | None
    variables: frozenset[str] = frozenset()
    """Every variable a template or a partial it reaches reads; for a
    composite, the inputs its expressions read."""
    pattern: Pattern | None = None
    """A composite's pattern (None for a prompt definition)."""
    placeholders: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """By role, the names its template (with the partials it includes by a
    literal name) writes as placeholders; only roles that write one."""

    @cached_property
    def spec(self) -> AgentSpec:
        """The definition read into typed, frozen views (``registry.format.spec``)."""
        return AgentSpec.of(self.definition)

    @cached_property
    def parser(self) -> OutputParser:
        """The output parser the definition declares (``text`` by default)."""
        return OutputParser.from_definition(self.definition)

    def render(self, inputs: Any, *, limits: RenderLimits, measured: bool = False) -> Prompt:
        """Validate ``inputs`` and render every role's template, in file order;
        then fill the placeholders the inputs name, and list those left
        (``registry.rendering.placeholders``).

        Inputs over the input budget of ``limits`` are refused before any
        schema work: too much text as ``PayloadTooLarge`` (more than a
        request may carry), too many values or levels as ``InvalidInputs``;
        ``measured`` says the caller has found them within it already, by
        ``measure``'s own count. Validating and rendering share one clock,
        ``limits.max_seconds``.
        """
        if self.pattern is not None:
            # A composite runs other agents: there is no one prompt to render.
            raise NotAPrompt(
                f"this is a composite agent (pattern: {self.pattern.kind}); it runs other agents,"
                " so it has no prompt of its own to render: render the agents its steps name",
                steps=[{"call": call.label, "agent": call.agent} for call in self.pattern.calls],
            )
        deadline = Deadline.after(limits.max_seconds)
        variables = self._checked_inputs(inputs, limits, deadline, measured=measured)
        tools = self.definition.get("tools")
        if tools is not None and "tools" not in variables:
            variables["tools"] = _tools_for_templates(tools)
        messages: tuple[Message, ...] = render_messages(self.templates, variables, limits=limits, deadline=deadline.at)
        prompt = Prompt(messages=messages, model=self.definition.get("model"), params=self.definition.get("params"))
        if not self.placeholders:
            return prompt
        return placeholders_from_inputs(prompt, self.placeholders, variables, limits=limits, deadline=deadline.at)

    def check_inputs(self, inputs: Any, *, limits: RenderLimits) -> dict[str, Any]:
        """``inputs`` checked as a render checks them (the budget of
        ``limits``, then the ``inputs`` schema), with the schema's defaults
        filled in: for a composite, whose inputs are checked before it runs."""
        return self._checked_inputs(inputs, limits, Deadline.after(limits.max_seconds))

    def _checked_inputs(
        self, inputs: Any, limits: RenderLimits, deadline: Deadline, *, measured: bool = False
    ) -> dict[str, Any]:
        if not isinstance(inputs, dict):
            raise InvalidInputs(
                "inputs must be a JSON object",
                [Issue(message=f"expected an object, got {_json_type(inputs)}")],
            )
        excess = (
            None if measured else measure(inputs, max_values=limits.max_input_values, max_chars=limits.max_input_chars)
        )
        if excess is not None:
            if excess.budget == "text":
                raise PayloadTooLarge(excess.issue.message)
            raise InvalidInputs(summarize([excess.issue]), [excess.issue])
        if self.inputs is None:
            return dict(inputs)
        issues = self.inputs.issues(inputs, deadline=deadline, measured=True)
        if issues:
            issues = sorted(_distinct(issues), key=lambda i: i.path)
            raise InvalidInputs(summarize(issues), issues)
        return self.inputs.with_defaults(inputs)


def compile_definition(
    definition: Any,
    environment: TemplateEnvironment,
    *,
    file: str | None = None,
    document: YamlDocument | None = None,
) -> CompiledAgent:
    """Validate a definition and compile its templates.

    Raises ``InvalidDefinition`` listing every problem found.
    """
    locate = locator(file, document)
    if not isinstance(definition, dict):
        issue = locate(f"a definition is a mapping of keys, not {_json_type(definition)}", (), rule="not-a-mapping")
        raise InvalidDefinition(summarize([issue]), [issue])
    issues = _schema_issues(definition, locate)
    compiled = _compile_templates(definition, environment, file, locate)
    issues.extend(compiled.issues)
    inputs_schema = None
    inputs = definition.get("inputs")
    # Declared tools are supplied to the templates: `tools` need not be an input.
    supplied = {"tools"} if isinstance(definition.get("tools"), list) else set()
    if isinstance(inputs, dict):
        inputs_schema, inputs_issues = _inputs_schema(inputs, compiled.needed, locate, supplied)
        issues.extend(inputs_issues)
    issues.extend(agent_type_issues(definition, locate))
    pattern = read_pattern(definition) if not issues else None
    read: frozenset[str] = frozenset().union(*compiled.needed.values())
    if pattern is not None:
        pattern, problems = local_issues(pattern, definition, environment)
        issues.extend(locate(p.message, p.path, hint=p.hint, rule=p.rule) for p in problems)
        declared = inputs.get("properties") if isinstance(inputs, dict) else None
        everything = set(declared) if pattern.reads_all_inputs and isinstance(declared, dict) else set()
        read = pattern.inputs_read | everything
    if issues:
        raise InvalidDefinition(summarize(issues), issues)
    return CompiledAgent(
        definition=definition,
        templates=tuple(compiled.templates),
        partials=tuple(sorted(compiled.partials)),
        dynamic_includes=compiled.dynamic,
        inputs=inputs_schema,
        variables=read,
        pattern=pattern,
        placeholders={role: names for role, names in compiled.placeholders.items() if names},
    )


@dataclass
class _Templates:
    """What compiling a definition's ``prompt_templates`` found."""

    templates: list[tuple[str, CompiledTemplate]] = field(default_factory=list)
    partials: set[str] = field(default_factory=set)
    dynamic: bool = False
    needed: dict[str, set[str]] = field(default_factory=dict)
    """Per role: every variable its template and the partials it reaches read."""
    placeholders: dict[str, frozenset[str]] = field(default_factory=dict)
    """Per role: every placeholder name its template and the partials it reaches write."""
    issues: list[Issue] = field(default_factory=list)


def _compile_templates(
    definition: dict[str, Any], environment: TemplateEnvironment, file: str | None, locate: Locate
) -> _Templates:
    found = _Templates()
    raw_templates = definition.get("prompt_templates")
    if not isinstance(raw_templates, dict):
        return found
    for role, source in raw_templates.items():
        if not isinstance(source, str) or role not in ("system", "user", "assistant"):
            continue  # reported by the schema
        path: JsonPath = ("prompt_templates", role)
        try:
            compiled = CompiledTemplate(environment, source, name=f"{file or 'definition'}#{role}")
        except TemplateCompileError as exc:
            found.issues.append(
                locate(f"{role} template: {exc.problem.message}", path, exc.problem.line, rule="template-syntax")
            )
            continue
        found.templates.append((role, compiled))
        reached, variables, is_dynamic, include_issues = _follow_includes(environment, compiled)
        found.partials |= reached
        found.dynamic = found.dynamic or is_dynamic
        found.issues.extend(locate(f"{role} template: {message}", path, rule=rule) for rule, message in include_issues)
        found.needed[role] = set(compiled.variables) | variables
        found.placeholders[role] = written_names(source).union(
            *(partial_placeholders(environment, partial) for partial in reached)
        )
    return found


def definition_digest(
    source: bytes,
    partials: Mapping[str, bytes],
    *,
    tree_content_id: str | None = None,
) -> str:
    """``sha256:<hex>`` over the definition, the partials it reaches and the
    rendering semantics. ``tree_content_id`` is folded in when a template
    computes an include name at render time, since then any file may matter."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("semantics", RENDER_SEMANTICS.encode())
    add("definition", source)
    for name in sorted(partials):
        add("partial:" + name, partials[name])
    if tree_content_id is not None:
        add("tree", tree_content_id.encode())
    return "sha256:" + digest.hexdigest()


def _tools_for_templates(tools: list[Any]) -> list[Any]:
    """The declared tools as templates see them: without their ``x-`` keys,
    which are for the executor and the operator, never for the model."""
    return [
        {key: value for key, value in tool.items() if not key.startswith("x-")} if isinstance(tool, dict) else tool
        for tool in tools
    ]


def check_agent_name(usecase: str, name: str) -> None:
    """Raise ``InvalidRequest`` unless both match ``^[a-z0-9][a-z0-9_-]{0,63}$``."""
    for label, value in (("usecase", usecase), ("name", name)):
        if not NAME_PATTERN.fullmatch(value):
            raise InvalidRequest(
                f"{label} {shorten(value)!r} is not valid: use 1 to 64 characters of a-z, 0-9, '_' and '-',"
                " starting with a letter or digit",
                parameter=label,
            )


Locate = Callable[..., Issue]


def locator(file: str | None, document: YamlDocument | None) -> Locate:
    """Turns a message and a JSON path into an ``Issue`` at its line in ``file``."""

    def locate(
        message: str,
        path: JsonPath,
        template_line: int | None = None,
        *,
        key: bool = False,
        hint: str | None = None,
        rule: str = "schema",
    ) -> Issue:
        position = document.position(path, key=key) if document is not None else None
        line = column = None
        if position is not None:
            line, column = position.line, position.column
            if template_line is not None and position.block:
                # A block scalar's content starts on the line after "|", one
                # template line per file line. Quoted and plain scalars fold
                # and escape their lines, so they keep the scalar's own line.
                line = position.line + template_line
                column = None
        return Issue(
            message=message, path=json_pointer(path), file=file, line=line, column=column, hint=hint, rule=rule
        )

    return locate


def _schema_issues(definition: dict[str, Any], locate: Locate) -> list[Issue]:
    errors = _definition_validator().iter_errors(definition)
    issues = _distinct(issue for error in errors for issue in _schema_error_issues(error, locate))
    return sorted(issues, key=lambda i: (i.line or 0, i.path))


def _distinct(issues: Iterable[Issue]) -> list[Issue]:
    """The first of each issue (a path and a message), in order.

    jsonschema reports "required" once per missing key, and each of those
    errors names them all, so the same issue can come more than once.
    """
    first: dict[tuple[str, str], Issue] = {}
    for issue in issues:
        first.setdefault((issue.path, issue.message), issue)
    return list(first.values())


def _schema_error_issues(error: ValidationError, locate: Locate) -> list[Issue]:
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        extras = [k for k in error.instance if k not in allowed and not _matches_any(k, patterns)]
        return [
            locate(f"unknown key {shorten(k)!r}", path + (k,), key=True, hint=_did_you_mean(k, allowed, patterns))
            for k in extras
        ]
    if error.validator == "not" and "then" in error.schema_path and path:
        # The schema's "if pattern then none of the prompt keys".
        return [
            locate(
                f"{path[-1]!r} is for prompt definitions; a composite (with 'pattern') cannot have it",
                path,
                key=True,
                hint="a definition has either prompt_templates or pattern: split it into two agents",
            )
        ]
    if error.validator == "pattern" and path and path[-1] == "agent" and isinstance(error.instance, str):
        return [
            locate(
                f"agent reference {shorten(error.instance)!r} is not usecase/name",
                path,
                hint="name an agent of the same release as usecase/name, e.g. support/draft_answer",
                rule="composite-reference",
            )
        ]
    listed = error.validator_value  # a keyword's value: enum's members, required's names
    if "propertyNames" in error.schema_path and error.validator == "enum" and isinstance(listed, list):
        # jsonschema reports a bad key against its parent, with the key as the instance.
        name = error.instance
        allowed = [str(v) for v in listed]
        return [
            locate(
                f"key {shorten(name)!r} is not allowed here; expected one of {', '.join(allowed)}",
                path + (name,),
                key=True,
                hint=_did_you_mean(str(name), allowed, []),
            )
        ]
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(listed, list):
        return [locate(f"missing required key {name!r}", path) for name in listed if name not in error.instance]
    return [locate(shorten(error.message, _MAX_MESSAGE), path)]


def _matches_any(key: str, patterns: list[str]) -> bool:
    return any(re.search(p, key) for p in patterns)


def _did_you_mean(key: str, allowed: list[str], patterns: list[str]) -> str | None:
    suggestion = did_you_mean(close_matches(key, allowed, limit=1))
    if suggestion:
        return suggestion
    if patterns:
        return f"allowed keys: {', '.join(allowed)}; extension keys start with 'x-'"
    return f"allowed keys: {', '.join(allowed)}" if allowed else None


def _follow_includes(
    environment: TemplateEnvironment, compiled: CompiledTemplate
) -> tuple[set[str], set[str], bool, list[tuple[str, str]]]:
    """Every partial reachable by literal name, the variables they need,
    whether any name is computed at render time, and what is wrong (rule, message)."""
    reached: set[str] = set()
    variables: set[str] = set()
    problems: list[tuple[str, str]] = []
    dynamic = False
    pending = list(compiled.referenced)
    while pending:
        name = pending.pop()
        if name is None:
            dynamic = True
            continue
        if name in reached:
            continue
        try:
            normalize_include_name(name)
            needs, references = analyse_partial(environment, name)
        except TemplateNotFound as exc:
            problems.append(("missing-include", exc.message or f"template {name!r} does not exist"))
            continue
        except TemplateCompileError as exc:
            where = f" (line {exc.problem.line})" if exc.problem.line else ""
            problems.append(("template-syntax", f"included template {name!r}{where}: {exc.problem.message}"))
            continue
        reached.add(name)
        variables |= needs
        pending.extend(references)
    return reached, variables, dynamic, problems


def _inputs_schema(
    inputs: dict[str, Any], needed: dict[str, set[str]], locate: Locate, supplied: set[str]
) -> tuple[InputsSchema | None, list[Issue]]:
    try:
        schema = InputsSchema(inputs)
    except SchemaProblem as exc:
        return None, [
            locate(f"inputs {shorten(exc.message, _MAX_MESSAGE)}", ("inputs", *exc.path), rule="inputs-schema")
        ]
    declared = inputs.get("properties", {})
    declared = set(declared) if isinstance(declared, dict) else set()
    issues = [
        locate(
            f"{role} template uses {variable!r}, which inputs does not declare",
            ("prompt_templates", role),
            hint=f"add {variable!r} to inputs.properties",
            rule="undeclared-variable",
        )
        for role, variables in needed.items()
        for variable in sorted(variables - declared - supplied)
    ]
    return schema, issues


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__
