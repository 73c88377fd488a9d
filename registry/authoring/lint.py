"""``prompt-registry lint``: every problem in a library checkout, before merge.

A working tree is read as the registry would serve it (``WorktreeStore`` and
``ReleaseCatalog``: the same YAML reader, schema, template compiler and
include resolution as the server), so lint passes exactly when the registry
would serve every definition. On top of what serving needs, lint reports
what is probably a mistake: files outside the layout, inputs nothing uses,
includes it cannot check, partials nothing includes, and includes that
recurse on every path (Jinja finds those only when a render never ends).
It also checks the eval files beside the agents root (``lintevals``).

This module walks the library (on several processes when it is large);
what it reports is in ``lintreport``, the checks beyond serving in
``lintchecks``, and the include graph in ``includegraph``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from registry.authoring.agentsroot import find_agents_root
from registry.authoring.includegraph import IncludeCycle, IncludeGraph
from registry.authoring.lintchecks import (
    layout_finding,
    param_findings,
    placeholder_findings,
    tool_findings,
    usage_warnings,
)
from registry.authoring.lintevals import lint_evals
from registry.authoring.lintreport import Finding, LintReport, finding
from registry.errors import ConfigurationError, InvalidDefinition
from registry.format.loading import DEFINITION_SUFFIX, ReleaseCatalog
from registry.format.safeyaml import YamlError, YamlLimits, parse_yaml
from registry.rendering import referenced_templates
from registry.store.worktree import open_worktree_catalog

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
    definitions, partials = _survey(catalog, report)

    graph = IncludeGraph(catalog)
    included: set[str] = set()
    reaches_any = False
    cycles: dict[tuple[str, ...], IncludeCycle] = {}
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
            report.findings.append(finding("unused-partial", shown(partial), f"{partial} is not included anywhere"))
    # A cycle is reported once, at its first partial, however many definitions reach it.
    cycles.update((cycle.path, cycle) for cycle in graph.cycles(graph.reach(unincluded)[0]))
    for cycle in cycles.values():
        report.findings.append(
            finding(
                "recursive-include",
                shown(cycle.path[0]),
                f"recursive include: {cycle.shown}; every include in it is unconditional, so rendering never ends",
                line=cycle.line,
            )
        )
    lint_evals(base, agents_root, catalog, report)
    report.findings.sort(key=lambda f: (f.file, f.line or 0, f.column or 0, f.rule))
    return report


def _survey(catalog: ReleaseCatalog, report: LintReport) -> tuple[list[tuple[str, str]], list[str]]:
    """The definitions to check (usecase, name) and the partials of the
    catalog, in path order; each recorded in ``report``, with a finding for
    each definition outside the layout."""
    shown = catalog.repository_path
    definitions: list[tuple[str, str]] = []
    partials: list[str] = []
    for relative in sorted(catalog.tree.paths()):
        parts = relative.split("/")
        if any(part.startswith("_") for part in parts[:-1]):
            partials.append(relative)
            report.partials.append(shown(relative))
        elif relative.endswith((DEFINITION_SUFFIX, ".yaml")):
            layout = layout_finding(parts, shown(relative))
            if layout is not None:
                report.findings.append(layout)
            else:
                definitions.append((parts[0], parts[1][: -len(DEFINITION_SUFFIX)]))
    report.definitions = [shown(f"{usecase}/{name}{DEFINITION_SUFFIX}") for usecase, name in definitions]
    return definitions, partials


@dataclass(frozen=True)
class _Outcome:
    """What checking one definition found, which partials it reaches, and the
    recursive includes among them."""

    findings: list[Finding]
    partials: tuple[str, ...] = ()
    reaches_any: bool = False
    """An include is computed, or could not be read: any partial may be reached."""
    cycles: tuple[IncludeCycle, ...] = ()


def _check_all(
    catalog: ReleaseCatalog,
    graph: IncludeGraph,
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
_worker_graph: IncludeGraph | None = None


def _start_worker(base: Path, agents_root: str, limits: YamlLimits) -> None:
    global _worker_catalog, _worker_graph
    _worker_catalog = open_worktree_catalog(base, agents_root, limits)
    _worker_graph = IncludeGraph(_worker_catalog)


def _check_batch(batch: list[tuple[str, str]]) -> list[_Outcome]:
    assert _worker_catalog is not None and _worker_graph is not None
    return [_check(_worker_catalog, _worker_graph, usecase, name) for usecase, name in batch]


def _check(catalog: ReleaseCatalog, graph: IncludeGraph, usecase: str, name: str) -> _Outcome:
    file = catalog.repository_path(f"{usecase}/{name}{DEFINITION_SUFFIX}")
    loaded = catalog.load(usecase, name)
    if isinstance(loaded, InvalidDefinition):
        return _check_invalid(catalog, graph, usecase, name, loaded, file)
    roots = [(role, compiled.referenced) for role, compiled in loaded.compiled.templates]
    partials, reaches_any, cycles, cycle_findings = _includes(graph, roots, file)
    warnings = [
        *usage_warnings(loaded, file),
        *placeholder_findings(loaded, file),
        *tool_findings(loaded, file),
        *param_findings(loaded, file),
        *cycle_findings,
    ]
    if warnings:
        # Positions only when there is something to point at: parsing again costs.
        document = parse_yaml(catalog.definition_source(usecase, name), limits=catalog.yaml_limits)
        warnings = [w.located(document) for w in warnings]
    return _Outcome(warnings, partials, reaches_any, cycles)


def _check_invalid(
    catalog: ReleaseCatalog,
    graph: IncludeGraph,
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
        referenced = referenced_templates(catalog.environment, source, name=f"{file}#{role}")
        if referenced is None:
            return _Outcome(findings, reaches_any=True)
        roots.append((role, referenced))
    partials, reaches_any, cycles, cycle_findings = _includes(graph, roots, file)
    findings.extend(found.located(document) for found in cycle_findings)
    return _Outcome(findings, partials, reaches_any, cycles)


def _includes(
    graph: IncludeGraph, roots: list[tuple[str, tuple[str | None, ...]]], file: str
) -> tuple[tuple[str, ...], bool, tuple[IncludeCycle, ...], list[Finding]]:
    """What the templates of one definition (role, the names each includes)
    reach: the partials, whether any partial may be, the recursive includes,
    and a finding for each of those at the first template that reaches it."""
    partials: set[str] = set()
    reaches_any = False
    cycles: dict[tuple[str, ...], IncludeCycle] = {}
    findings = []
    for role, names in roots:
        reached, unknown = graph.reach(names)
        partials |= reached
        reaches_any = reaches_any or unknown
        for cycle in graph.cycles(reached):
            if cycle.path not in cycles:
                cycles[cycle.path] = cycle
                findings.append(
                    finding(
                        "recursive-include",
                        file,
                        f"{role} template reaches a recursive include: {cycle.shown}",
                        at=("prompt_templates", role),
                    )
                )
    return tuple(sorted(partials)), reaches_any, tuple(cycles.values()), findings
