"""The HTML report: an evaluation as one self-contained page, to keep as a
CI artifact and open in a browser.

Both pins and the gate at the top, then per eval file a summary table
(cases, pass rate, judge score with its bootstrap interval, tokens,
latency, each side's digest and each judge's), then every case: regressed,
fixed, errors and failures first and open, then the rest folded. Each case
shows base's and head's outputs side by side with a word diff
(``registry.evals.reports.worddiff``: deletions in ``<del>``, insertions in
``<ins>``), the assertions of the run shown with their status and reason
and a judge's score and digest, and every run's outcome, tokens, latency
and trace id.

The page loads nothing: its style is inline, it has no script, and its
Content-Security-Policy forbids anything else. It is rendered by Jinja with
autoescaping (``templates/eval_report.html``), so an output is text
whatever it holds; control characters are replaced. A page of thousands
of cases stays usable: outputs are cut at ``OUTPUT_CHARS`` characters and
the diff compares at most ``worddiff.MAX_TOKENS`` tokens a side, each
saying so where it happens.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import jinja2

from registry.evals.gate import percent
from registry.evals.reports.facts import (
    MARKS,
    judge_digests,
    runs_passed,
    score_interval,
    seconds_per_run,
    short_digest,
    shown_run,
    visible,
    why_not_passed,
    worth_a_look,
)
from registry.evals.reports.text import Painter, plain
from registry.evals.reports.worddiff import MAX_TOKENS, Piece, word_diff
from registry.evals.results import (
    AssertionOutcome,
    CaseComparison,
    CaseResult,
    DatasetResult,
    EvalRun,
    RunRecord,
    SideSummary,
)
from registry.models import plural

OUTPUT_CHARS = 10_000


@dataclass(frozen=True)
class SideView:
    """One case on one side, as the page shows it."""

    side: str
    status: str
    runs_passed: str
    reason: str
    output: tuple[Piece, ...] | None
    """The output of the run shown, in diff pieces; None when it gave none."""
    output_note: str
    assertions: tuple[AssertionOutcome, ...]
    runs: tuple[RunRecord, ...]


@dataclass(frozen=True)
class CaseView:
    case_id: str
    mark: str
    """``regressed``, ``fixed``, ``error``, ``failed``; or the case's change when it is none of those."""
    where: str
    open: bool
    sides: tuple[SideView | None, ...]
    """Base's then head's when there are two sides; head's alone otherwise."""
    diff_note: str


@dataclass(frozen=True)
class Row:
    """A line of an eval file's summary table: what, on base, on head, the change."""

    label: str
    base: str
    head: str
    change: str = ""
    code: bool = False


@dataclass(frozen=True)
class DatasetView:
    dataset: DatasetResult
    rows: tuple[Row, ...]
    cases: tuple[CaseView, ...]


def render_html(run: EvalRun, paint: Painter = plain) -> str:
    """The whole page."""
    two = run.base is not None
    datasets = [
        DatasetView(dataset, tuple(_rows(dataset, two=two)), _cases(dataset, two=two)) for dataset in run.datasets
    ]
    return _template().render(
        run=run,
        two=two,
        datasets=datasets,
        overview=[(view, view.dataset.summary("base"), view.dataset.summary("head")) for view in datasets],
        runs=sum(d.summary("head").runs + (d.summary("base").runs if two else 0) for d in run.datasets),
        rate=_rate,
        short=short_digest,
        plural=plural,
        max_tokens=MAX_TOKENS,
    )


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("registry.evals.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["visible"] = visible
    return environment.get_template("eval_report.html")


def _rate(summary: SideSummary) -> str:
    return percent(summary.pass_rate) if summary.pass_rate is not None else "n/a"


def _rows(dataset: DatasetResult, *, two: bool) -> Iterator[Row]:
    base, head = dataset.summary("base"), dataset.summary("head")
    yield Row("cases", str(base.cases), str(head.cases))
    yield Row("passed", str(base.passed), str(head.passed), _delta(base.passed, head.passed, two=two))
    yield Row("failed", str(base.failed), str(head.failed), _delta(base.failed, head.failed, two=two))
    yield Row("errors", str(base.errors), str(head.errors), _delta(base.errors, head.errors, two=two))
    points = ""
    if two and base.pass_rate is not None and head.pass_rate is not None:
        points = f"{(head.pass_rate - base.pass_rate) * 100:+.3g} points"
    yield Row("pass rate (runs)", _rate(base), _rate(head), points)
    yield Row("judge score", _score(base), _score(head), _score_change(dataset, base, head))
    yield Row("tokens in + out", _tokens(base), _tokens(head))
    before, after = seconds_per_run(base), seconds_per_run(head)
    yield Row("latency per run", _seconds(before), _seconds(after), _relative(before, after))
    yield Row("agent digest", _digest(dataset.base), dataset.head.digest or "none", code=True)
    for judge in judge_digests(dataset):
        changed = "changed" if two and judge.base != judge.head else ""
        yield Row(f"judge {judge.agent}", judge.base or "none", judge.head or "none", changed, code=True)
    base_file = dataset.base.eval_file_id or "none" if dataset.base is not None else ""
    yield Row("eval file (blob)", base_file, dataset.head.eval_file_id or "none", code=True)


def _digest(side: object) -> str:
    digest = getattr(side, "digest", None)
    return str(digest) if digest else ("none" if side is not None else "")


def _delta(before: int, after: int, *, two: bool) -> str:
    return f"{after - before:+d}" if two and after != before else ""


def _score(summary: SideSummary) -> str:
    mean = summary.judge_score_mean
    return f"{mean:.3f} ({plural(len(summary.judge_scores), 'score')})" if mean is not None else "—"


def _score_change(dataset: DatasetResult, base: SideSummary, head: SideSummary) -> str:
    if dataset.base is None or base.judge_score_mean is None or head.judge_score_mean is None:
        return ""
    change = f"{head.judge_score_mean - base.judge_score_mean:+.3f}"
    interval = score_interval(dataset)
    if interval is None:
        return change
    return (
        f"{change}, {interval.confidence:.0%} interval {interval.low:+.3f} to {interval.high:+.3f}"
        f" ({plural(interval.cases, 'case')} resampled {interval.resamples} times)"
    )


def _tokens(summary: SideSummary) -> str:
    if summary.input_tokens is None and summary.output_tokens is None:
        return "—"
    return f"{summary.input_tokens or 0} + {summary.output_tokens or 0}"


def _seconds(seconds: float | None) -> str:
    return f"{seconds:.3f} s" if seconds is not None else "—"


def _relative(before: float | None, after: float | None) -> str:
    if not before or after is None:
        return ""
    change = (after - before) / before
    return f"{change:+.0%}" if abs(change) >= 0.005 else "±0%"


def _cases(dataset: DatasetResult, *, two: bool) -> tuple[CaseView, ...]:
    """Every case: those worth a look first, in that order, then the rest as in the file."""
    listed = worth_a_look(dataset.cases)
    marked = {id(comparison): mark for comparison, mark in listed}
    rest = [comparison for comparison in dataset.cases if id(comparison) not in marked]
    ordered: list[tuple[CaseComparison, str]] = [*listed, *((comparison, comparison.change) for comparison in rest)]
    return tuple(_case(comparison, mark, two=two) for comparison, mark in ordered)


def _case(comparison: CaseComparison, mark: str, *, two: bool) -> CaseView:
    base, head = comparison.base, comparison.head
    before, after = _output(base), _output(head)
    diff_note = ""
    if two and before is not None and after is not None:
        diff = word_diff(before, after)
        base_pieces: tuple[Piece, ...] | None = diff.base
        head_pieces: tuple[Piece, ...] | None = diff.head
        if diff.cut:
            diff_note = f"The word diff compares the first {MAX_TOKENS:,} words of each output."
    else:
        base_pieces = (Piece(before, "same"),) if before is not None else None
        head_pieces = (Piece(after, "same"),) if after is not None else None
    sides = [_side("head", head, head_pieces)]
    if two:
        sides.insert(0, _side("base", base, base_pieces))
    written = head or base
    return CaseView(
        case_id=comparison.case_id,
        mark=mark,
        where=written.where if written is not None else "",
        open=mark in MARKS[:4],
        sides=tuple(sides),
        diff_note=diff_note,
    )


def _output(case: CaseResult | None) -> str | None:
    run = shown_run(case) if case is not None else None
    if run is None or run.output is None:
        return None
    return visible(run.output[:OUTPUT_CHARS])


def _side(name: str, case: CaseResult | None, pieces: tuple[Piece, ...] | None) -> SideView | None:
    if case is None:
        return None
    run = shown_run(case)
    whole = run.output if run is not None and run.output is not None else ""
    note = (
        f"Cut at {OUTPUT_CHARS:,} of {len(whole):,} characters: the JSON report has it whole."
        if len(whole) > OUTPUT_CHARS
        else ""
    )
    return SideView(
        side=name,
        status=case.status,
        runs_passed=runs_passed(case),
        reason=visible(why_not_passed(case)),
        output=pieces,
        output_note=note,
        assertions=run.assertions if run is not None else (),
        runs=case.runs,
    )
