"""``prompt-registry lint``: every problem in a library checkout, before merge.

A working tree is read as the registry would serve it (``WorktreeStore`` and
``ReleaseCatalog``: the same YAML reader, schema, template compiler and
include resolution as the server), so lint passes exactly when the registry
would serve every definition. On top of what serving needs, lint reports
what is probably a mistake: files outside the layout, inputs nothing uses,
includes it cannot check, partials nothing includes, and includes that
recurse on every path (Jinja finds those only when a render never ends).

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

from jinja2 import TemplateError, meta, nodes

from registry.errors import ConfigurationError, InvalidDefinition
from registry.format.definition import NAME_PATTERN, TOOL_EXTENSIONS
from registry.format.graphs import components, shortest_ring
from registry.format.loading import DEFINITION_SUFFIX, LoadedAgent, ReleaseCatalog
from registry.format.parsers import OutputParser, ParseError
from registry.format.safeyaml import JsonPath, YamlDocument, YamlError, YamlLimits, parse_yaml
from registry.models import Issue, close_matches, did_you_mean, json_pointer, shorten
from registry.settings import DEFAULT_ROOT
from registry.store.worktree import WorktreeStore

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
            "tool-extension",
            "warning",
            "an x- key on a tool that looks like a misspelt one the executor reads",
            "spell it as the hint says; other x- keys are served as written for your own tools",
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
    """The agents root inside ``path``: ``root`` when given, else the default;
    ``ConfigurationError`` when it is not there."""
    wanted = (root or DEFAULT_ROOT).strip("/")
    if (path / wanted).is_dir():
        return wanted
    raise ConfigurationError(
        f"no prompt library here: no {wanted}/ in {path.resolve()}; run this inside a library checkout,"
        " or give --repo PATH (or --root)"
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

    graph = _IncludeGraph(catalog)
    included: set[str] = set()
    reaches_any = False
    cycles: dict[tuple[str, ...], _Cycle] = {}
    for outcome in _check_all(catalog, graph, base, agents_root, limits, definitions, progress, jobs):
        report.findings.extend(outcome.findings)
        included.update(outcome.partials)
        reaches_any = reaches_any or outcome.reaches_any
        cycles.update((cycle.path, cycle) for cycle in outcome.cycles)
    unincluded = [partial for partial in partials if partial not in included]
    # A computed include, or one lint could not read, may reach any partial:
    # then none is called unused.
    if not reaches_any:
        for partial in unincluded:
            report.findings.append(_finding("unused-partial", shown(partial), f"{partial} is not included anywhere"))
    # A cycle is reported once, at its first partial, however many definitions reach it.
    cycles.update((cycle.path, cycle) for cycle in graph.cycles(graph.reach(unincluded)[0]))
    for cycle in cycles.values():
        report.findings.append(
            _finding(
                "recursive-include",
                shown(cycle.path[0]),
                f"recursive include: {cycle.shown}; every include in it is unconditional, so rendering never ends",
                line=cycle.line,
            )
        )
    report.findings.sort(key=lambda f: (f.file, f.line or 0, f.column or 0, f.rule))
    return report


@dataclass(frozen=True)
class _Cycle:
    """Templates that include one another in a ring, each unconditionally:
    ``path`` starts at the first by name and ends where it started."""

    path: tuple[str, ...]
    line: int
    """Of the include from the first template to the second."""

    @property
    def shown(self) -> str:
        """The path joined by arrows; a long ring with its middle left out."""
        path = self.path
        if len(path) > _SHOWN_NAMES + 1:
            path = (*path[: _SHOWN_NAMES - 2], f"({len(path) - _SHOWN_NAMES} more)", *path[-2:])
        return " -> ".join(path)


_SHOWN_NAMES = 8


@dataclass(frozen=True)
class _Outcome:
    """What checking one definition found, which partials it reaches, and the
    recursive includes among them."""

    findings: list[Finding]
    partials: tuple[str, ...] = ()
    reaches_any: bool = False
    """An include is computed, or could not be read: any partial may be reached."""
    cycles: tuple[_Cycle, ...] = ()


def open_worktree_catalog(base: Path, agents_root: str, limits: YamlLimits) -> ReleaseCatalog:
    """The catalog of a working tree, as the registry would serve it."""
    store = WorktreeStore(base, root=agents_root)
    tree = store.tree(store.releases().releases[0])
    return ReleaseCatalog(tree, root=agents_root, yaml_limits=limits)


def _check_all(
    catalog: ReleaseCatalog,
    graph: _IncludeGraph,
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
            yield _check(catalog, graph, usecase, name)
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
_worker_graph: _IncludeGraph | None = None


def _start_worker(base: Path, agents_root: str, limits: YamlLimits) -> None:
    global _worker_catalog, _worker_graph
    _worker_catalog = open_worktree_catalog(base, agents_root, limits)
    _worker_graph = _IncludeGraph(_worker_catalog)


def _check_batch(batch: list[tuple[str, str]]) -> list[_Outcome]:
    assert _worker_catalog is not None and _worker_graph is not None
    return [_check(_worker_catalog, _worker_graph, usecase, name) for usecase, name in batch]


def _check(catalog: ReleaseCatalog, graph: _IncludeGraph, usecase: str, name: str) -> _Outcome:
    file = catalog.repository_path(f"{usecase}/{name}{DEFINITION_SUFFIX}")
    loaded = catalog.load(usecase, name)
    if isinstance(loaded, InvalidDefinition):
        return _check_invalid(catalog, graph, usecase, name, loaded, file)
    roots = [(role, compiled.referenced) for role, compiled in loaded.compiled.templates]
    partials, reaches_any, cycles, cycle_findings = _includes(graph, roots, file)
    warnings = [*_warnings(loaded, file), *_tool_findings(loaded, file), *cycle_findings]
    if warnings:
        # Positions only when there is something to point at: parsing again costs.
        document = parse_yaml(catalog.definition_source(usecase, name), limits=catalog.yaml_limits)
        warnings = [w.located(document) for w in warnings]
    return _Outcome(warnings, partials, reaches_any, cycles)


def _check_invalid(
    catalog: ReleaseCatalog,
    graph: _IncludeGraph,
    usecase: str,
    name: str,
    invalid: InvalidDefinition,
    file: str,
) -> _Outcome:
    """An invalid definition's errors; and, since its templates are still
    what its author means to include, the partials they reach."""
    findings = [Finding.from_issue(issue, file) for issue in invalid.errors]
    try:
        document = parse_yaml(catalog.definition_source(usecase, name), limits=catalog.yaml_limits)
    except YamlError:
        return _Outcome(findings, reaches_any=True)
    templates = (document.value.get("prompt_templates") or {}) if isinstance(document.value, dict) else None
    if not isinstance(templates, dict):
        return _Outcome(findings, reaches_any=True)
    roots: list[tuple[str, tuple[str | None, ...]]] = []
    for role, source in templates.items():
        if not isinstance(source, str):
            continue  # not a template: the schema says so
        try:
            parsed = catalog.environment.parse(source, name=f"{file}#{role}")
        except (TemplateError, RecursionError, MemoryError):
            return _Outcome(findings, reaches_any=True)
        roots.append((role, tuple(meta.find_referenced_templates(parsed))))
    partials, reaches_any, cycles, cycle_findings = _includes(graph, roots, file)
    findings.extend(finding.located(document) for finding in cycle_findings)
    return _Outcome(findings, partials, reaches_any, cycles)


def _includes(
    graph: _IncludeGraph, roots: list[tuple[str, tuple[str | None, ...]]], file: str
) -> tuple[tuple[str, ...], bool, tuple[_Cycle, ...], list[Finding]]:
    """What the templates of one definition (role, the names each includes)
    reach: the partials, whether any partial may be, the recursive includes,
    and a finding for each of those at the first template that reaches it."""
    partials: set[str] = set()
    reaches_any = False
    cycles: dict[tuple[str, ...], _Cycle] = {}
    findings = []
    for role, names in roots:
        reached, unknown = graph.reach(names)
        partials |= reached
        reaches_any = reaches_any or unknown
        for cycle in graph.cycles(reached):
            if cycle.path not in cycles:
                cycles[cycle.path] = cycle
                findings.append(
                    _finding(
                        "recursive-include",
                        file,
                        f"{role} template reaches a recursive include: {cycle.shown}",
                        at=("prompt_templates", role),
                    )
                )
    return tuple(sorted(partials)), reaches_any, tuple(cycles.values()), findings


@dataclass(frozen=True)
class _Template:
    """What one included file includes in turn."""

    references: tuple[str | None, ...]
    """Every name it includes, imports or extends; None for one computed at
    render time, or when the file does not compile (it may include anything)."""
    always: dict[str, int]
    """The names it includes every time it renders, with the first line of each."""


_UNREADABLE = _Template((None,), {})
# Statements whose body may run once, never, or many times; a block's body
# is replaced by that of a template that extends this one.
_BRANCHES = (nodes.If, nodes.For, nodes.Macro, nodes.CallBlock, nodes.Block)
_INCLUDES = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)


class _IncludeGraph:
    """The templates of one catalog as a graph of includes, each file read
    once: which partials a definition reaches, and the rings of includes that
    can never end."""

    def __init__(self, catalog: ReleaseCatalog) -> None:
        self._catalog = catalog
        self._templates: dict[str, _Template | None] = {}
        self._cycles: dict[str, _Cycle | None] = {}

    def template(self, name: str) -> _Template | None:
        """The file ``name`` as a template; None when there is no such file."""
        if name not in self._templates:
            self._templates[name] = self._read(name)
        return self._templates[name]

    def reach(self, names: Iterable[str | None]) -> tuple[set[str], bool]:
        """Every file that ``names`` include, directly or not, and whether
        one may be any file at all."""
        reached: set[str] = set()
        unknown = False
        pending = list(names)
        while pending:
            name = pending.pop()
            if name is None:
                unknown = True
                continue
            if name in reached:
                continue
            template = self.template(name)
            if template is not None:
                reached.add(name)
                pending.extend(template.references)
        return reached, unknown

    def cycles(self, names: Iterable[str]) -> list[_Cycle]:
        """The rings of unconditional includes that any of ``names`` is in,
        once each, by path."""
        found: dict[tuple[str, ...], _Cycle] = {}
        for name in sorted(names):
            if name not in self._cycles:
                self._find_components(name)
            cycle = self._cycles[name]
            if cycle is not None:
                found.setdefault(cycle.path, cycle)
        return sorted(found.values(), key=lambda cycle: cycle.path)

    def _read(self, name: str) -> _Template | None:
        try:
            self._catalog.tree.size(name)
        except KeyError:
            return None
        environment = self._catalog.environment
        try:
            # The registry's own loader: the same name rules, size limit and encoding.
            source, _, _ = environment.loader.get_source(environment, name)  # type: ignore[union-attr]  # a TemplateEnvironment always has its loader
            tree = environment.parse(source, name=name)
        except (TemplateError, RecursionError, MemoryError):
            return _UNREADABLE
        return _Template(tuple(meta.find_referenced_templates(tree)), _unconditional_includes(tree))

    def _always(self, name: str) -> list[str]:
        template = self.template(name)
        return [] if template is None else sorted(t for t in template.always if self.template(t) is not None)

    def _find_components(self, start: str) -> None:
        """The strongly connected components of the unconditional includes
        from ``start``; each records its cycle."""
        for component in components(start, self._always, self._cycles):
            cycle = self._shortest_cycle(component)
            for member in component:
                self._cycles[member] = cycle

    def _shortest_cycle(self, component: set[str]) -> _Cycle | None:
        """The shortest ring through the component's first template, or None
        when the component is one template that does not include itself."""
        first = min(component)
        ring = shortest_ring(first, self._always, component)
        if ring is None:
            return None
        template = self.template(first)
        assert template is not None
        return _Cycle(ring, template.always[ring[1]])


def _unconditional_includes(tree: nodes.Template) -> dict[str, int]:
    """The literal names a template includes, imports or extends every time
    it renders (not under an if, a for, a macro, a call or a block), each
    with its first line."""
    found: dict[str, int] = {}
    pending: list[nodes.Node] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, _INCLUDES) and isinstance(node.template, nodes.Const):
            name = node.template.value
            if isinstance(name, str) and (name not in found or node.lineno < found[name]):
                found[name] = node.lineno
        if not isinstance(node, _BRANCHES):
            pending.extend(node.iter_child_nodes())
    return found


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
        yield from _tool_extension_findings(declared, file)
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


def _tool_extension_findings(declared: list[Any], file: str) -> Iterable[Finding]:
    """An ``x-`` key close to one the executor reads (``x-requires-aproval``),
    or about approval at all (``x-approval``), would silently run the tool
    without approval: say so."""
    for index, tool in enumerate(declared):
        for key in tool if isinstance(tool, dict) else ():
            if isinstance(key, str) and key.startswith("x-") and key not in TOOL_EXTENSIONS:
                hint = did_you_mean(close_matches(key, TOOL_EXTENSIONS, cutoff=0.75))
                if hint is None and "approv" in key.lower():  # x-approval, x-approve, x-needs-approving
                    hint = did_you_mean(["x-requires-approval"])
                if hint:
                    message = f"tool {tool.get('name')!r}: {key!r} is not read by the executor"
                    yield _finding("tool-extension", file, message, hint=hint, at=("tools", index, key))


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
    line: int | None = None,
) -> Finding:
    rule = RULES[rule_id]
    return Finding(
        rule=rule.id, severity=rule.severity, file=file, message=message, hint=hint or rule.hint, at=at, line=line
    )
