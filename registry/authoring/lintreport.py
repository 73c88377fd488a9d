"""What lint reports: its rules, each finding, and the report of one library.

Every finding has a stable rule id (``RULES``: what it means, its severity
and a default hint), a file, a line and column when known, and a one-line
hint. ``lintformat`` writes a ``LintReport`` for people and for CI.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from registry.format.safeyaml import JsonPath, YamlDocument
from registry.models import Issue, json_pointer

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    summary: str
    hint: str


RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule("yaml-syntax", "error", "the file is not valid YAML of JSON types", "fix the YAML at the position shown"),
        Rule("duplicate-key", "error", "a mapping has the same key twice", "remove one of the two"),
        Rule(
            "not-a-mapping", "error", "the file is not a mapping of keys", "start with 'name:' and 'prompt_templates:'"
        ),
        Rule("schema", "error", "the definition does not fit its JSON Schema", "see docs/definition-format.md"),
        Rule("inputs-schema", "error", "'inputs' is not a valid JSON Schema", "fix the schema keyword shown"),
        Rule(
            "name",
            "error",
            "a usecase or agent name the registry cannot serve",
            "use 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
        ),
        Rule(
            "layout",
            "error",
            "a definition outside <usecase>/<name>.yml",
            "move it to <usecase>/<name>.yml, or into a directory starting with '_' if it is a partial",
        ),
        Rule("template-syntax", "error", "a template does not compile", "fix the Jinja syntax at the line shown"),
        Rule(
            "undeclared-variable",
            "error",
            "a template reads a variable that inputs does not declare",
            "declare it under inputs.properties",
        ),
        Rule(
            "unused-input",
            "warning",
            "an input is declared but no template reads it",
            "remove it from inputs, or use it in a template",
        ),
        Rule("missing-include", "error", "an include or import names no file", "fix the name, or add the partial"),
        Rule(
            "dynamic-include",
            "warning",
            "an include name is computed at render time, so it cannot be checked",
            "include a literal name, e.g. {% include '_partials/x.jinja' %}",
        ),
        Rule(
            "unused-partial",
            "warning",
            "a partial that no definition includes",
            "include it from a definition, or delete it",
        ),
        Rule(
            "recursive-include",
            "error",
            "a partial includes itself, directly or through others, on every path, so rendering never ends",
            "break the cycle, or put the include under an {% if %} or {% for %} that ends",
        ),
        Rule("file-size", "error", "the file is larger than the registry serves", "split it into partials"),
        Rule(
            "agent-type",
            "error",
            "type, tools, tool_choice, output_parser, rag and max_iterations do not fit together",
            "see 'Agent types' in docs/definition-format.md",
        ),
        Rule(
            "react-example",
            "error",
            "a JSON example of the reply format in a template that the agent's own parser rejects",
            "make the example a reply the react_json parser accepts",
        ),
        Rule(
            "unknown-tool",
            "error",
            "a template names a tool the definition does not declare",
            "declare the tool under 'tools:', or fix its name",
        ),
        Rule(
            "composite-reference",
            "error",
            "a composite runs an agent that is not a valid agent of the same release",
            "reference an existing, valid agent of this release as usecase/name",
        ),
        Rule(
            "composite-cycle",
            "error",
            "composites that run each other in a cycle, so a run never ends",
            "break the cycle: a composite cannot run itself, directly or through others",
        ),
        Rule(
            "composite-inputs",
            "error",
            "a step's inputs read what is not available at that point, or do not fit the agent they call",
            "read only the composite's inputs and earlier steps, and map the inputs the called agent declares",
        ),
        Rule(
            "composite-duplicate-id",
            "error",
            "two steps or branches of a composite have the same id",
            "give each step and branch its own id",
        ),
        Rule(
            "composite-parser",
            "error",
            "a gate, classifier or evaluator agent does not parse the JSON fields the pattern reads",
            "give the agent 'output_parser: {type: json, output_schema: ...}' with the fields, typed",
        ),
        Rule(
            "composite-route",
            "error",
            "route labels differ from the labels the classifier can give, and there is no default",
            "make the routes equal the classifier's enum, or add a default route",
        ),
        Rule(
            "composite-depth",
            "error",
            "composites nest deeper than the registry allows",
            "flatten the pattern",
        ),
        Rule(
            "composite-size",
            "error",
            "a composite can run more agents, or holds more calls in its graph, than the registry answers",
            "split it into composites run one after another",
        ),
        Rule(
            "composite-budget",
            "error",
            "a composite's worst-case number of model calls is over its limit",
            "make the pattern smaller, or raise limits.max_llm_calls",
        ),
        Rule(
            "unfilled-placeholder",
            "error",
            "a template writes a placeholder ({name}) that no input and no runtime variable can fill",
            "declare it under inputs.properties, or print it, {{ '{name}' }}, to keep it as text",
        ),
        Rule(
            "tool-extension",
            "warning",
            "an x- key on a tool that looks like a misspelt one the executor reads",
            "spell it as the hint says; other x- keys are served as written for your own tools",
        ),
        Rule(
            "model-param",
            "warning",
            "a model.params key that looks misspelt, or that the definition's provider does not take",
            "remove it, or bind the provider to a kind that takes it"
            " (see 'Parameters, per provider' in docs/executor.md)",
        ),
        Rule("eval-schema", "error", "an eval file does not fit its format", "see docs/evals.md"),
        Rule(
            "eval-layout",
            "warning",
            "a .yml or .yaml file under the evals root outside <usecase>/<name>.yml, so it is not read",
            "move it to <evals root>/<usecase>/<name>.yml, or under a directory starting with '_' if it is not one",
        ),
        Rule(
            "eval-agent",
            "error",
            "an eval file for an agent that is not in the library",
            "fix the agent's name, or name the agent with 'agent: usecase/name'",
        ),
        Rule(
            "eval-inputs",
            "error",
            "a case's inputs name an input the agent does not declare, or do not fit its inputs schema",
            "give each case the inputs the agent declares",
        ),
        Rule(
            "eval-judge",
            "error",
            "a judge that is not an agent of the library, or that cannot judge",
            "a judge has 'output_parser: {type: json, output_schema: ...}' requiring score (a number from 0 to 1),"
            " pass (a boolean) and reason (a string), and takes inputs, answer and expectation; see docs/evals.md",
        ),
        Rule(
            "eval-duplicate-id",
            "error",
            "two cases of an eval file have the same id",
            "give each case its own id: reports compare cases by id",
        ),
        Rule(
            "eval-regex",
            "error",
            "a regex assertion RE2 cannot run (backreferences, lookaround)",
            "rewrite it in RE2's syntax, which matches in time linear in the output",
        ),
        Rule("internal", "error", "the file could not be checked", "report this as a bug in prompt-registry"),
    )
}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    file: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str | None = None
    path: str = ""
    at: JsonPath = ()
    """The path as keys, for ``located``."""
    template_line: int | None = None
    """For a finding inside the template at ``at``: its line in the template (1-based)."""

    def located(self, document: YamlDocument) -> Finding:
        """With the line and column of ``at`` in ``document``; inside a
        literal block template, of the template line."""
        position = document.position(self.at, key=self.template_line is None) if self.at else None
        if position is None:
            return self
        if self.template_line is not None and position.block:
            # A literal block's text starts on the line after "|", one template line per file line.
            return replace(self, line=position.line + self.template_line, column=None)
        return replace(self, line=position.line, column=position.column)

    def __post_init__(self) -> None:
        if self.at and not self.path:
            object.__setattr__(self, "path", json_pointer(self.at))

    @classmethod
    def from_issue(cls, issue: Issue, file: str) -> Finding:
        rule = RULES.get(issue.rule or "", RULES["schema"])
        return cls(
            rule=rule.id,
            severity=rule.severity,
            file=issue.file or file,
            message=issue.message,
            line=issue.line,
            column=issue.column,
            hint=issue.hint or rule.hint,
            path=issue.path,
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
            "path": self.path,
        }


@dataclass
class LintReport:
    """What lint found in one library."""

    root: str
    definitions: list[str] = field(default_factory=list)
    """Paths relative to the repository, like every path in a report."""
    partials: list[str] = field(default_factory=list)
    evals: list[str] = field(default_factory=list)
    """The eval files read (``registry.authoring.lintevals``)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    def findings_for(self, file: str) -> list[Finding]:
        return [f for f in self.findings if f.file == file]


def finding(
    rule_id: str,
    file: str,
    message: str,
    *,
    hint: str | None = None,
    at: JsonPath = (),
    line: int | None = None,
    column: int | None = None,
    template_line: int | None = None,
) -> Finding:
    """A finding of the rule ``rule_id``, with the rule's own hint unless given one."""
    rule = RULES[rule_id]
    return Finding(
        rule=rule.id,
        severity=rule.severity,
        file=file,
        message=message,
        hint=hint or rule.hint,
        at=at,
        line=line,
        column=column,
        template_line=template_line,
    )
