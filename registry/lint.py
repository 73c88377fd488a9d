"""``prompt-registry lint``: every problem in a library checkout, before merge.

A working tree is read as the registry would serve it (``WorktreeStore`` and
``ReleaseCatalog``: the same YAML reader, schema, template compiler and
include resolution as the server), so lint passes exactly when the registry
would serve every definition. On top of what serving needs, lint reports
what is probably a mistake: files outside the layout, inputs nothing uses,
includes it cannot check, partials nothing includes.

Every finding has a stable rule id (``RULES``), a severity, a file, a line and
column when known, and a one-line hint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from registry.errors import ConfigurationError, InvalidDefinition
from registry.loading import DEFINITION_SUFFIX, NAME_PATTERN, LoadedAgent, ReleaseCatalog
from registry.models import Issue, json_pointer, shorten
from registry.parsers import OutputParser, ParseError
from registry.safeyaml import JsonPath, YamlDocument, YamlLimits, parse_yaml
from registry.worktree import WorktreeStore

DEFAULT_ROOT = "ai_gateway/agents"
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
        Rule("file-size", "error", "the file is larger than the registry serves", "split it into partials"),
        Rule(
            "agent-type",
            "error",
            "type, tools, output_parser, rag and max_iterations do not fit together",
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

    def located(self, document: YamlDocument) -> Finding:
        """With the line and column of ``at`` in ``document``."""
        position = document.position(self.at, key=True) if self.at else None
        if position is None:
            return self
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
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    @property
    def warnings(self) -> int:
        return sum(f.severity == "warning" for f in self.findings)

    def findings_for(self, file: str) -> list[Finding]:
        return [f for f in self.findings if f.file == file]


def find_agents_root(path: Path, root: str | None) -> str:
    """The agents root inside ``path``: ``root`` when given, else the default
    when it exists, else ``path`` itself when it looks like one."""
    if root is not None:
        root = root.strip("/")
        if not (path / root).is_dir():
            raise ConfigurationError(f"{path / root} is not a directory")
        return root
    if (path / DEFAULT_ROOT).is_dir():
        return DEFAULT_ROOT
    raise ConfigurationError(
        f"no {DEFAULT_ROOT}/ under {path}: run lint in a library checkout, or give the agents root with --root"
    )


# Below this many definitions, starting worker processes costs more than it saves.
_PARALLEL_FROM = 200
_BATCH = 100


def lint(
    path: str | os.PathLike[str],
    *,
    root: str | None = None,
    limits: YamlLimits = YamlLimits(),
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = None,
) -> LintReport:
    """Lint the library checked out at ``path``, on ``jobs`` processes
    (default: one per core) when it is large."""
    base = Path(path)
    if not base.is_dir():
        raise ConfigurationError(f"{path} is not a directory")
    agents_root = find_agents_root(base, root)
    catalog = open_worktree_catalog(base, agents_root, limits)
    report = LintReport(root=agents_root)
    shown = catalog.repository_path

    definitions: list[tuple[str, str]] = []
    partials: list[str] = []
    for relative in sorted(catalog.tree.paths()):
        parts = relative.split("/")
        if any(part.startswith("_") for part in parts[:-1]):
            partials.append(relative)
            report.partials.append(shown(relative))
        elif relative.endswith((DEFINITION_SUFFIX, ".yaml")):
            layout = _layout_finding(parts, shown(relative))
            if layout is not None:
                report.findings.append(layout)
            else:
                definitions.append((parts[0], parts[1][: -len(DEFINITION_SUFFIX)]))
    report.definitions = [shown(f"{usecase}/{name}{DEFINITION_SUFFIX}") for usecase, name in definitions]

    included: set[str] = set()
    dynamic = False
    for outcome in _check_all(catalog, base, agents_root, limits, definitions, progress, jobs):
        report.findings.extend(outcome.findings)
        included.update(outcome.partials)
        dynamic = dynamic or outcome.dynamic
    # A computed include may reach any partial: then none is called unused.
    if not dynamic:
        for partial in partials:
            if partial not in included:
                report.findings.append(
                    _finding("unused-partial", shown(partial), f"{partial} is not included anywhere")
                )
    report.findings.sort(key=lambda f: (f.file, f.line or 0, f.column or 0, f.rule))
    return report


@dataclass(frozen=True)
class _Outcome:
    """What checking one definition found, and which partials it reaches."""

    findings: list[Finding]
    partials: tuple[str, ...] = ()
    dynamic: bool = False


def open_worktree_catalog(base: Path, agents_root: str, limits: YamlLimits) -> ReleaseCatalog:
    """The catalog of a working tree, as the registry would serve it."""
    store = WorktreeStore(base, root=agents_root)
    tree = store.tree(store.releases().releases[0])
    return ReleaseCatalog(tree, root=agents_root, yaml_limits=limits)


def _check_all(
    catalog: ReleaseCatalog,
    base: Path,
    agents_root: str,
    limits: YamlLimits,
    definitions: list[tuple[str, str]],
    progress: Callable[[int, int], None] | None,
    jobs: int | None,
) -> Iterator[_Outcome]:
    jobs = jobs or os.cpu_count() or 1
    total = len(definitions)
    if jobs == 1 or total < _PARALLEL_FROM:
        for done, (usecase, name) in enumerate(definitions, start=1):
            yield _check(catalog, usecase, name)
            if progress is not None:
                progress(done, total)
        return
    batches = [definitions[i : i + _BATCH] for i in range(0, total, _BATCH)]
    done = 0
    with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(base, agents_root, limits)) as pool:
        for outcomes in pool.map(_check_batch, batches):
            yield from outcomes
            done += len(outcomes)
            if progress is not None:
                progress(done, total)


_worker_catalog: ReleaseCatalog | None = None


def _start_worker(base: Path, agents_root: str, limits: YamlLimits) -> None:
    global _worker_catalog
    _worker_catalog = open_worktree_catalog(base, agents_root, limits)


def _check_batch(batch: list[tuple[str, str]]) -> list[_Outcome]:
    assert _worker_catalog is not None
    return [_check(_worker_catalog, usecase, name) for usecase, name in batch]


def _check(catalog: ReleaseCatalog, usecase: str, name: str) -> _Outcome:
    file = catalog.repository_path(f"{usecase}/{name}{DEFINITION_SUFFIX}")
    loaded = catalog.load(usecase, name)
    if isinstance(loaded, InvalidDefinition):
        return _Outcome([Finding.from_issue(issue, file) for issue in loaded.errors])
    warnings = list(_warnings(loaded, file)) + list(_tool_findings(loaded, file))
    if warnings:
        # Positions only when there is something to point at: parsing again costs.
        document = parse_yaml(catalog.definition_source(usecase, name), limits=catalog.yaml_limits)
        warnings = [w.located(document) for w in warnings]
    return _Outcome(warnings, loaded.compiled.partials, loaded.compiled.dynamic_includes)


def _layout_finding(parts: list[str], file: str) -> Finding | None:
    if not file.endswith(DEFINITION_SUFFIX):
        return _finding("layout", file, "definitions end in .yml", hint="rename it to .yml")
    if len(parts) != 2:
        where = "directly under the agents root" if len(parts) == 1 else "nested more than one directory deep"
        return _finding("layout", file, f"a definition {where} is not served")
    usecase, name = parts[0], parts[1][: -len(DEFINITION_SUFFIX)]
    for label, value in (("usecase", usecase), ("name", name)):
        if not NAME_PATTERN.fullmatch(value):
            return _finding("name", file, f"{label} {value!r} is not a valid name, so the agent is not served")
    return None


def _warnings(loaded: LoadedAgent, file: str) -> Iterable[Finding]:
    compiled = loaded.compiled
    inputs = loaded.definition.get("inputs")
    properties = inputs.get("properties") if isinstance(inputs, dict) else None
    # With a computed include, any partial may read any input.
    if isinstance(properties, dict) and not compiled.dynamic_includes:
        for unused in sorted(set(properties) - compiled.variables):
            yield _finding(
                "unused-input",
                file,
                f"input {unused!r} is declared but no template reads it",
                at=("inputs", "properties", unused),
            )
    if compiled.dynamic_includes:
        yield _finding(
            "dynamic-include",
            file,
            "a template computes an include name at render time",
            at=("prompt_templates",),
        )


_ACTION_LINE = re.compile(r"^[ \t]*Action[ \t]*:[ \t]*[`'\"*]*([A-Za-z_][A-Za-z0-9_]*)[`'\"*]*[ \t]*$", re.MULTILINE)
_REPLY_KEYS = {"thought", "action", "answer"}


def _tool_findings(loaded: LoadedAgent, file: str) -> Iterable[Finding]:
    """Tools the templates name must exist; for react_json agents, every JSON
    example of the reply format must be one the agent's parser accepts."""
    declared = loaded.definition.get("tools")
    texts = [*loaded.definition.get("prompt_templates", {}).items(), *loaded.partials.items()]
    if isinstance(declared, list):
        names = {tool.get("name") for tool in declared if isinstance(tool, dict)}
        for where, text in texts:
            for match in _ACTION_LINE.finditer(text):
                if match.group(1) not in names:
                    yield _finding("unknown-tool", file, f"{where}: 'Action: {match.group(1)}' names no declared tool")
    spec = loaded.definition.get("output_parser")
    if isinstance(spec, dict) and spec.get("type") == "react_json":
        parser = OutputParser.from_definition(loaded.definition)
        for where, text in texts:
            for example in _json_objects(text):
                if _REPLY_KEYS & set(example):
                    result = parser.parse(json.dumps(example))
                    if isinstance(result, ParseError):
                        yield _finding(
                            "react-example",
                            file,
                            f"{where}: the example {shorten(json.dumps(example), 80)} is rejected by the parser"
                            f" ({result.reason}: {shorten(result.observation, 120)})",
                        )


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object literally in ``text`` (Jinja's {{ }} and {% %} are not JSON)."""
    decoder = json.JSONDecoder()
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            yield value
        position = text.find("{", end)


def _finding(
    rule_id: str,
    file: str,
    message: str,
    *,
    hint: str | None = None,
    at: JsonPath = (),
) -> Finding:
    rule = RULES[rule_id]
    return Finding(rule=rule.id, severity=rule.severity, file=file, message=message, hint=hint or rule.hint, at=at)
