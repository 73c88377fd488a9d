"""What lint checks of eval files: each ``.yml`` file under the evals root
(``registry.evals.dataset.evals_root``, beside the agents root).

The file's format is ``registry.evals``' own reading (every problem at its
line, with "did you mean"; duplicate ids; patterns RE2 refuses); against the
library, lint adds: the agent exists; each case's inputs are ones it
declares (with "did you mean") and fit its inputs schema; each judge is an
agent of the library that can judge (``registry.evals.judge_problems``).
A file is read case by case, so a dataset of 100,000 cases is linted in the
memory of one; past ``MAX_FINDINGS`` findings in one file, one more says
how many were left out. Files under a directory starting with ``_`` are
not eval files (keep replays and fixtures there).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.authoring.lintreport import Finding, LintReport, finding
from registry.errors import ConfigurationError, InvalidDefinition
from registry.evals import EvalCase, EvalHeader, InvalidCase, Judge, agent_of_path, evals_root, judge_problems
from registry.evals.reading import EvalFile, EvalLimits, open_eval_file
from registry.format.definition import NAME_PATTERN
from registry.format.loading import LoadedAgent, ReleaseCatalog
from registry.format.safeyaml import JsonPath, Position
from registry.models import Issue, close_matches, did_you_mean, plural, shorten

MAX_FINDINGS = 200
"""Findings reported for one eval file: a dataset broken on every case says so once, not 100,000 times."""
RETRIEVED = "passages"
"""The input a ``rag`` agent's passages arrive in (``registry.executor.turns.PASSAGES``): the executor
fills it, retrieved or empty, so a case need not give it."""


def lint_evals(
    base: Path, agents_root: str, catalog: ReleaseCatalog, report: LintReport, *, limits: EvalLimits = EvalLimits()
) -> None:
    """Check every eval file of the library at ``base``, into ``report``."""
    root = evals_root(agents_root)
    directory = base / root
    if not directory.is_dir():
        return
    agents = {f"{usecase}/{name}" for usecase, name in catalog.agent_names()}
    for relative in _files(directory):
        file = f"{root}/{relative}" if root else relative
        layout = _layout_finding(relative, file)
        if layout is not None:
            report.findings.append(layout)
            continue
        report.evals.append(file)
        checker = _FileChecker(file, catalog, agents)
        try:
            with open_eval_file(
                directory / relative, source=file, agent=agent_of_path(relative), limits=limits
            ) as read:
                report.findings.extend(checker.findings(read))
        except ConfigurationError as exc:  # a file that cannot be opened
            report.findings.append(finding("eval-schema", file, exc.detail, hint="check the file's permissions"))


def _files(directory: Path) -> Iterator[str]:
    """The files under ``directory`` that may be eval files, as ``/``-separated relative paths, sorted."""
    found: list[str] = []
    for folder, subfolders, names in os.walk(directory):
        subfolders[:] = [name for name in subfolders if not name.startswith(("_", "."))]
        relative = Path(folder).relative_to(directory)
        found.extend((relative / name).as_posix() for name in names if name.endswith((".yml", ".yaml")))
    yield from sorted(found)


def _layout_finding(relative: str, file: str) -> Finding | None:
    if not relative.endswith(".yml"):
        return finding("eval-layout", file, "eval files end in .yml", hint="rename it to .yml")
    parts = relative.split("/")
    if len(parts) != 2:
        where = "directly under the evals root" if len(parts) == 1 else "nested more than one directory deep"
        return finding("eval-layout", file, f"a file {where} is not read as an eval file")
    usecase, name = parts[0], parts[1][: -len(".yml")]
    if not (NAME_PATTERN.fullmatch(usecase) and NAME_PATTERN.fullmatch(name)):
        return finding(
            "eval-layout", file, f"{relative!r} is not <usecase>/<name>.yml, so it is not read as an eval file"
        )
    return None


@dataclass
class _Agent:
    """An agent of the library, loaded once per file: what its cases are checked against."""

    loaded: LoadedAgent | None
    """None when the definition is invalid (its own findings say why)."""
    declared: frozenset[str] | None = None
    """The inputs it takes by name; None: any."""
    required: frozenset[str] = frozenset()


@dataclass
class _FileChecker:
    """Checks one eval file, case by case, against the library."""

    file: str
    catalog: ReleaseCatalog
    agents: set[str]
    found: list[Finding] = field(default_factory=list)
    judges: set[str] = field(default_factory=set)
    """The judge agents checked so far: each is reported once per file."""
    left_out: int = 0

    def findings(self, read: EvalFile) -> list[Finding]:
        header = read.header
        self._issues(header.issues)
        agent = self._agent(header)
        for index, assertion in enumerate(header.defaults.expect):
            if isinstance(assertion, Judge):
                self._judge(assertion, header.position(("defaults", "expect", index)))
        for entry in read.entries():
            if isinstance(entry, InvalidCase):
                self._issues(entry.issues)
                continue
            if agent is not None and agent.loaded is not None:
                self._inputs(entry, agent)
            own = entry.expect[len(header.defaults.expect) :]
            for index, assertion in enumerate(own):
                if isinstance(assertion, Judge):
                    self._judge(assertion, entry.position(("expect", index)))
        self._issues(read.problems)
        if self.left_out:
            message = f"and {plural(self.left_out, 'more problem')} in this file, left out"
            self.found.append(finding("eval-schema", self.file, message, hint="fix the problems shown, and lint again"))
        return self.found

    def _add(self, found: Finding) -> None:
        if len(self.found) < MAX_FINDINGS:
            self.found.append(found)
        else:
            self.left_out += 1

    def _issues(self, issues: Iterable[Issue]) -> None:
        for issue in issues:
            self._add(Finding.from_issue(issue, self.file))

    def _at(self, rule: str, message: str, position: Position | None, *, hint: str | None = None) -> None:
        line, column = (position.line, position.column) if position else (None, None)
        self._add(finding(rule, self.file, message, hint=hint, line=line, column=column))

    # --- the agent ----------------------------------------------------------------------------

    def _agent(self, header: EvalHeader) -> _Agent | None:
        """The agent the file evaluates, or None (after a finding) when it does not exist."""
        if header.agent is None:
            return None
        if header.agent not in self.agents:
            where = header.position(("agent",))
            how = "" if where is not None else " (the agent its path names)"
            hint = did_you_mean(close_matches(header.agent, sorted(self.agents)))
            message = f"agent {header.agent} does not exist in this library{how}" + (f"; {hint}" if hint else "")
            self._at("eval-agent", message, where or Position(1, 1))
            return None
        return _load(self.catalog, header.agent)

    def _inputs(self, case: EvalCase, agent: _Agent) -> None:
        assert agent.loaded is not None
        name = f"{agent.loaded.usecase}/{agent.loaded.name}"
        given = list(case.inputs)
        if agent.declared is not None:
            for undeclared in (key for key in given if key not in agent.declared):
                choices = [declared for declared in sorted(agent.declared) if declared not in case.inputs]
                hint = did_you_mean(close_matches(undeclared, choices))
                message = f"case {case.id!r}: {name} takes no input {shorten(undeclared, 60)!r}"
                where = case.position(("inputs", undeclared), key=True)
                self._at("eval-inputs", message + (f"; {hint}" if hint else ""), where, hint=hint)
        schema = agent.loaded.compiled.inputs
        inputs = dict(case.inputs)
        if agent.loaded.compiled.spec.kind == "rag":
            inputs.setdefault(RETRIEVED, [])  # the executor retrieves them, or passes none
        if schema is None:
            for missing in sorted(agent.required - set(inputs)):
                message = f"case {case.id!r}: {name} needs input {missing!r} (its templates read it)"
                self._at("eval-inputs", message, case.position(("inputs",)) or case.position())
            return
        for issue in schema.issues(inputs):
            if issue.message.startswith("unexpected input"):
                continue  # reported above, with a "did you mean"
            path = _pointer_path(issue.path)
            where = case.position(("inputs", *path)) or case.position()
            self._at("eval-inputs", f"case {case.id!r}: {issue.message}", where)

    # --- judges --------------------------------------------------------------------------------

    def _judge(self, judge: Judge, where: Position | None) -> None:
        if judge.agent in self.judges:
            return
        self.judges.add(judge.agent)
        if judge.agent not in self.agents:
            hint = did_you_mean(close_matches(judge.agent, sorted(self.agents)))
            message = f"judge {judge.agent} is not an agent of this library" + (f"; {hint}" if hint else "")
            self._at("eval-judge", message, where)
            return
        loaded = _load(self.catalog, judge.agent).loaded
        if loaded is None:
            self._at("eval-judge", f"judge {judge.agent} is an invalid definition", where)
            return
        for problem in judge_problems(loaded.definition, loaded.compiled.variables):
            self._at("eval-judge", f"judge {judge.agent} cannot judge: {problem}", where)


def _load(catalog: ReleaseCatalog, agent: str) -> _Agent:
    usecase, name = agent.split("/")
    loaded = catalog.load(usecase, name)
    if isinstance(loaded, InvalidDefinition):
        return _Agent(None)
    inputs = loaded.definition.get("inputs")
    if isinstance(inputs, dict):
        properties = inputs.get("properties")
        declared = frozenset(properties) if isinstance(properties, dict) else None
        return _Agent(loaded, declared)
    # Without an inputs schema a leaf takes what its templates read, and needs all of it.
    variables = loaded.compiled.variables - {"tools"}
    return _Agent(loaded, variables, frozenset() if loaded.compiled.pattern is not None else variables)


def _pointer_path(pointer: str) -> JsonPath:
    """A JSON pointer as the path of keys and indexes that positions are keyed by."""
    parts: list[Any] = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
    return tuple(int(part) if part.isdigit() else part for part in parts)
