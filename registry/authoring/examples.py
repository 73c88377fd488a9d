"""``prompt-registry test``: render every definition's examples and check them.

An example (``examples:`` in a definition, see the JSON Schema) gives inputs
and either expectations per role (``contains``, ``not_contains``, ``matches``
with RE2 regular expressions) or ``golden: true``: the whole rendering must
equal ``<name>.examples/<example>.txt`` next to the definition, a file that
``--update`` (re)writes. Rendering is the registry's own, on the working
tree, so an example that passes here renders the same from the server. A
definition with examples that cannot be run (it is invalid, or the registry
does not serve the file) fails the run: nothing may pass untested.
"""

from __future__ import annotations

import asyncio
import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import re2

from registry.authoring.agentsroot import find_agents_root
from registry.authoring.colour import diff_lines, paint
from registry.client import Agent
from registry.errors import ConfigurationError, InvalidDefinition, RegistryError
from registry.evals.runnable import agent_at
from registry.format.loading import DEFINITION_SUFFIX, LoadedAgent, ReleaseCatalog
from registry.format.safeyaml import YamlLimits
from registry.models import Issue, Prompt, Release, Resolution, location, plural
from registry.rendering import RenderLimits
from registry.store.worktree import open_worktree_catalog

if TYPE_CHECKING:
    from registry.executor import Executor, RunResult

GOLDEN_SUFFIX = ".examples"
WORKTREE = "worktree"
_NOT_SERVED = (
    "the registry does not serve this file (a definition is <usecase>/<name>.yml, each name 1 to 64"
    " characters of a-z, 0-9, '_' and '-'), so its examples were not run"
)


@dataclass
class ExampleResult:
    file: str
    """The definition, relative to the repository."""
    agent: str
    example: str | None
    """None when none of the definition's examples could be run (``problems`` say why)."""
    problems: list[str] = field(default_factory=list)
    diff: str | None = None
    updated: bool = False

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass
class TestReport:
    results: list[ExampleResult] = field(default_factory=list)

    @property
    def failed(self) -> list[ExampleResult]:
        """Every example that failed, and every definition whose examples were not run."""
        return [r for r in self.results if not r.passed]

    @property
    def not_run(self) -> list[ExampleResult]:
        """Definitions with examples that could not be run (invalid, or not served)."""
        return [r for r in self.results if r.example is None]


def run_examples(
    path: str | os.PathLike[str], *, root: str | None = None, update: bool = False, limits: YamlLimits = YamlLimits()
) -> TestReport:
    base = Path(path)
    agents_root = find_agents_root(base, root)
    catalog = open_worktree_catalog(base, agents_root, limits)
    report = TestReport()
    served = set()
    for usecase, name in catalog.agent_names():
        relative = f"{usecase}/{name}{DEFINITION_SUFFIX}"
        served.add(relative)
        file = catalog.repository_path(relative)
        loaded = catalog.load(usecase, name)
        if isinstance(loaded, InvalidDefinition):
            if _declares_examples(base / file):
                problems = ["the definition is invalid, so its examples were not run"]
                problems.extend(_located(issue, file) for issue in loaded.errors)
                report.results.append(ExampleResult(file, f"{usecase}/{name}", None, problems))
            continue
        golden_dir = base / agents_root / usecase / f"{name}{GOLDEN_SUFFIX}"
        report.results.extend(_run_agent(catalog, loaded, file, f"{usecase}/{name}", golden_dir, update=update))
    for relative in sorted(catalog.tree.paths()):
        parts = relative.split("/")
        if (
            relative.endswith((DEFINITION_SUFFIX, ".yaml"))
            and relative not in served
            and not any(part.startswith("_") for part in parts[:-1])
        ):
            file = catalog.repository_path(relative)
            if _declares_examples(base / file):
                agent = relative.rsplit(".", 1)[0]
                report.results.append(ExampleResult(file, agent, None, [_NOT_SERVED]))
    return report


def _located(issue: Issue, file: str) -> str:
    where = location(issue.file or file, issue.line, issue.column)
    return f"{where}: {issue.message}"


def _run_agent(
    catalog: ReleaseCatalog, loaded: LoadedAgent, file: str, agent: str, golden_dir: Path, *, update: bool
) -> Iterator[ExampleResult]:
    examples = loaded.definition.get("examples") or []
    seen: set[str] = set()
    for example in examples:
        label = str(example["name"])
        result = ExampleResult(file, agent, label)
        if label in seen:
            result.problems.append(f"another example is also named {label!r}")
            yield result
            continue
        seen.add(label)
        if "replies" in example:
            # A scripted run, end to end, of a leaf or a composite.
            result.problems.extend(check_run(runnable(catalog, loaded), example, f"{file} example {label!r}"))
            if loaded.compiled.pattern is not None:
                yield result
                continue
        if loaded.compiled.pattern is not None:
            # A composite runs other agents (with a model): without a script,
            # its example's inputs are checked against its own inputs schema.
            try:
                loaded.compiled.check_inputs(example["inputs"], limits=RenderLimits())
            except RegistryError as exc:
                result.problems.extend(_problems_of(exc, "inputs do not fit the composite"))
            yield result
            continue
        try:
            prompt = loaded.compiled.render(example["inputs"], limits=RenderLimits())
        except RegistryError as exc:
            result.problems.extend(_problems_of(exc, "does not render"))
            yield result
            continue
        _check_expectations(example.get("expect") or {}, prompt, result)
        if example.get("golden"):
            _check_golden(golden_dir / f"{label}.txt", prompt.as_text(), result, update=update)
        yield result


def runnable(catalog: ReleaseCatalog, loaded: LoadedAgent) -> Agent:
    """The agent as the executor takes it (the client's ``Agent``), with a
    composite's every agent, loaded from the working tree."""
    release = Release(tag=WORKTREE, version=None, commit=catalog.commit)
    return agent_at(catalog, Resolution(requested=WORKTREE, release=release, channel=None, immutable=False), loaded)


def check_run(agent: Agent, example: dict[str, Any], source: str) -> list[str]:
    """Run ``agent`` with the example's scripted replies, tool results and
    passages, and say what its ``expect_run`` finds wrong."""
    # Imported here: the executor brings the openai SDK, which every other
    # command (and `serve`, whose CLI imports this module) can do without.
    from registry.executor import Executor, Retriever, ScriptedModel
    from registry.executor.scripted import ScriptedRetriever, ScriptedTools

    try:
        model = ScriptedModel.from_replies(example["replies"], source=source)
    except ConfigurationError as exc:
        return [f"its replies are not a script: {exc}"]
    retrievers: dict[str, Retriever] = {}
    passages = example.get("passages")
    for member in [agent, *agent.agents.values()]:
        rag = member.definition.get("rag")
        if isinstance(rag, dict) and passages is not None:
            retrievers[str(rag["retriever"])] = ScriptedRetriever(passages, source=source)
    tools = ScriptedTools(example.get("tool_results") or {}, source=source)
    executor = Executor(model=model, tools=[tools], retrievers=retrievers)
    result = asyncio.run(_run_once(executor, agent, example["inputs"]))
    expected = example.get("expect_run") or {}
    problems = []
    outcome = expected.get("outcome", "completed")
    if result.outcome != outcome:
        problems.append(f"the run ended {result.outcome}, not {outcome}: {result.error or result.output!r}")
    output = result.output or ""
    checks = expected.get("output") or {}
    problems += [f"the output does not contain {text!r}" for text in checks.get("contains", []) if text not in output]
    problems += [f"the output contains {text!r}" for text in checks.get("not_contains", []) if text in output]
    for pattern in checks.get("matches", []):
        matched = _search(pattern, output)
        if matched is None:
            problems.append(f"output: {pattern!r} is not a valid regular expression")
        elif not matched:
            problems.append(f"the output does not match {pattern!r}")
    calls = expected.get("llm_calls")
    if calls is not None and result.llm_calls != calls:
        problems.append(f"the run made {plural(result.llm_calls, 'model call')}, not {calls}")
    unused = model.unused()
    if unused and not problems and outcome == "completed":
        problems.append(f"the run never used the reply at {unused[0]}")
    return problems


async def _run_once(executor: Executor, agent: Agent, inputs: dict[str, Any]) -> RunResult:
    async with executor:
        return await executor.arun(agent, inputs)


def _search(pattern: str, text: str) -> bool | None:
    try:
        return re2.search(pattern, text) is not None
    except re2.error:
        return None


def _problems_of(error: RegistryError, what: str) -> list[str]:
    """``what``, with the error and each issue it lists on a line of its own."""
    issues = getattr(error, "errors", [])
    return [f"{what}: {error}", *(f"  {issue.path or '/'}: {issue.message}" for issue in issues)]


def _check_expectations(expect: dict[str, Any], prompt: Prompt, result: ExampleResult) -> None:
    contents = {m.role: m.content for m in prompt.messages}
    for role, checks in expect.items():
        if role not in contents:
            result.problems.append(f"expects a {role} message, but the definition has no {role} template")
            continue
        text = contents[role]
        for wanted in checks.get("contains", []):
            if wanted not in text:
                result.problems.append(f"{role} message does not contain {wanted!r}")
        for unwanted in checks.get("not_contains", []):
            if unwanted in text:
                result.problems.append(f"{role} message contains {unwanted!r}")
        for pattern in checks.get("matches", []):
            try:
                matched = re2.search(pattern, text) is not None
            except re2.error as exc:
                reason = exc.args[0] if exc.args else exc
                if isinstance(reason, bytes):
                    reason = reason.decode("utf-8", "replace")
                result.problems.append(f"{role}: {pattern!r} is not a valid regular expression: {reason}")
                continue
            if not matched:
                result.problems.append(f"{role} message does not match {pattern!r}")


def _check_golden(golden: Path, rendered: str, result: ExampleResult, *, update: bool) -> None:
    try:
        expected: str | None = golden.read_text(encoding="utf-8")
    except FileNotFoundError:
        expected = None
    except (OSError, UnicodeDecodeError) as exc:
        result.problems.append(f"cannot read the golden file {golden.name}: {exc}")
        return
    if expected == rendered:
        return
    if update:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered, encoding="utf-8")
        result.updated = True
        return
    if expected is None:
        result.problems.append(f"no golden file {golden.parent.name}/{golden.name}; run with --update to write it")
        return
    result.problems.append(f"rendering differs from {golden.parent.name}/{golden.name}")
    result.diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            fromfile=f"{golden.parent.name}/{golden.name}",
            tofile="rendered",
        )
    )


def _declares_examples(path: Path) -> bool:
    try:
        return b"\nexamples:" in b"\n" + path.read_bytes()
    except OSError:
        return False


def report_text(report: TestReport, *, colour: bool = False) -> str:
    """One line per example (and per definition not run), the problems of
    each failure, and a summary; with ``colour``, ANSI colours: failures red,
    passes green, diffs as git colours them."""
    lines = []
    for result in report.results:
        if result.example is None:
            lines.append(f"{paint('NOT RUN', 'removed', colour=colour)}  {result.file}: {result.problems[0]}")
            lines.extend(f"    {problem}" for problem in result.problems[1:])
        elif result.updated:
            lines.append(f"updated  {result.agent} [{result.example}]")
        elif result.passed:
            lines.append(f"{paint('ok', 'added', colour=colour)}       {result.agent} [{result.example}]")
        else:
            lines.append(
                f"{paint('FAILED', 'removed', colour=colour)}   {result.agent} [{result.example}]  ({result.file})"
            )
            lines.extend(f"    {problem}" for problem in result.problems)
            if result.diff:
                lines.extend("    " + line for line in diff_lines(result.diff, colour=colour))
    not_run = len(report.not_run)
    failed = len(report.failed) - not_run
    summary = f"{len(report.results) - failed - not_run} passed, {failed} failed"
    if not_run:
        summary += f", {plural(not_run, 'definition')} not run"
    lines.append(paint(summary, "removed" if report.failed else "bold", colour=colour))
    return "\n".join(lines) + "\n"
