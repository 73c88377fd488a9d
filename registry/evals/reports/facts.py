"""What every report says the same way, worked out from the results: which
cases are worth a look and in what order, why a case did not pass, which
run of it to show, each judge's digest on both sides, and the judge score's
change with its bootstrap interval (``registry.evals.stats``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from registry.evals.results import CaseComparison, CaseResult, DatasetResult, EvalRun, RunRecord, SideSummary
from registry.evals.stats import CaseScores, Interval, bootstrap_change
from registry.models import plural

REPLACEMENT = "\ufffd"
# C0 and C1 controls but tab and newline (a carriage return is a control too:
# it rewrites a terminal's line and ends a Markdown table row), the
# bidirectional overrides that make text read otherwise than it is, and lone
# surrogates (a JSON reply may hold one; no UTF-8 file can).
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

Mark = Literal["regressed", "fixed", "error", "failed", "added", "removed"]
"""How a listed case is marked: how it changed, or for a case that did not
change, how it ended on head."""

MARKS: tuple[Mark, ...] = ("regressed", "fixed", "error", "failed", "added", "removed")
"""The marks in the order reports list them: what changed first."""


def worth_a_look(cases: Sequence[CaseComparison]) -> list[tuple[CaseComparison, Mark]]:
    """The cases to list, and how each is marked: regressed, then fixed, then
    errors, then failures. Cases that pass on head, and removed ones, are not listed."""
    found: list[tuple[CaseComparison, Mark]] = []
    for comparison in cases:
        mark = _mark(comparison)
        if mark is not None:
            found.append((comparison, mark))
    return sorted(found, key=lambda pair: MARKS.index(pair[1]))


def _mark(comparison: CaseComparison) -> Mark | None:
    change, head = comparison.change, comparison.head
    if change in ("regressed", "fixed", "error"):
        return change
    if change == "removed" or head is None or head.status == "passed":
        return None
    return "failed" if head.status == "failed" else "error"


def visible(text: str) -> str:
    """``text`` with every control character (but tab and newline),
    bidirectional override and lone surrogate replaced by U+FFFD: a model's
    output shown as it reads, never rewriting what is around it."""
    return _INVISIBLE.sub(REPLACEMENT, text)


def clip(text: str, *, chars: int, lines: int) -> str:
    """``text`` cut to at most ``lines`` lines and ``chars`` characters, saying how much was left out."""
    kept = text if len(text) <= chars else text[:chars]
    split = kept.split("\n")
    if len(split) > lines:
        kept = "\n".join(split[:lines])
    left = len(text) - len(kept)
    return kept if not left else f"{kept}… ({left} more characters)"


def short_digest(digest: str | None) -> str:
    """``sha256:1a2b...`` as its first 12 hex digits; ``none`` for no digest."""
    return digest.rpartition(":")[2][:12] if digest else "none"


@dataclass(frozen=True)
class JudgeDigests:
    """A judge agent's digest on each side (None where the side did not ask it)."""

    agent: str
    base: str | None
    head: str | None


def judge_digests(dataset: DatasetResult) -> list[JudgeDigests]:
    """Every judge either side's cases asked, by agent name."""
    found: dict[str, list[str | None]] = {pin.agent: [None, pin.digest] for pin in dataset.head.judges}
    for pin in dataset.base.judges if dataset.base is not None else ():
        found.setdefault(pin.agent, [None, None])[0] = pin.digest
    return [JudgeDigests(agent, base, head) for agent, (base, head) in sorted(found.items())]


def shown_run(case: CaseResult) -> RunRecord | None:
    """The run a report shows for a case: its first that did not pass, else its first."""
    return next((run for run in case.runs if run.status != "passed"), case.runs[0] if case.runs else None)


def why_not_passed(case: CaseResult) -> str:
    """One line: why the case could not run, why its run broke, or its first
    assertion that did not pass (``description: reason``); "" for a pass."""
    if case.problem is not None:
        return case.problem
    run = shown_run(case)
    if run is None:
        return "no run"
    if run.error:
        return run.error
    failing = next((a for a in run.assertions if a.status != "passed"), None)
    return f"{failing.description}: {failing.reason}" if failing is not None else ""


def runs_passed(case: CaseResult) -> str:
    """``2/3 runs passed`` for a repeated case; "" for a case run once."""
    if len(case.runs) < 2:
        return ""
    return f"{sum(run.status == 'passed' for run in case.runs)}/{len(case.runs)} runs passed"


def case_seconds(case: CaseResult) -> float:
    """How long the case's runs took, added up."""
    return sum(run.seconds for run in case.runs)


def seconds_per_run(summary: SideSummary) -> float | None:
    return summary.seconds / summary.runs if summary.runs else None


def repeated(dataset: DatasetResult) -> bool:
    """Whether any case ran more than once on a side (``--repeat`` or the file's ``repeat``)."""
    return any(len(case.runs) > 1 for comparison in dataset.cases for case in _sides(comparison))


def _sides(comparison: CaseComparison) -> Iterator[CaseResult]:
    yield from (case for case in (comparison.base, comparison.head) if case is not None)


def _scores(case: CaseResult | None) -> tuple[float, ...]:
    if case is None:
        return ()
    judges = (a.judge for run in case.runs for a in run.assertions if a.judge is not None)
    return tuple(judge.score for judge in judges if judge.score is not None)


def score_interval(dataset: DatasetResult) -> Interval | None:
    """The judge score's change base → head with its 95% bootstrap interval,
    when there are two sides, scores on both, and cases ran more than once."""
    if dataset.base is None or not repeated(dataset):
        return None
    return bootstrap_change(CaseScores(_scores(c.base), _scores(c.head)) for c in dataset.cases)


def run_settings(run: EvalRun) -> list[str]:
    """What every report says of how the run went, after its model: the
    concurrency, the repeat and limit when given, and the runs it made in
    how long."""
    settings = run.settings
    parts = [f"concurrency {settings.concurrency}"]
    if settings.repeat is not None:
        parts.append(f"repeat {settings.repeat}")
    if settings.limit is not None:
        parts.append(f"limit {settings.limit}")
    runs = sum(d.summary("head").runs + (d.summary("base").runs if d.base else 0) for d in run.datasets)
    parts.append(f"{plural(runs, 'run')} in {run.seconds:.2f} s")
    return parts
