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
Content-Security-Policy forbids anything else. It is built with
MarkupSafe's ``Markup.format``, which escapes every value it is given that
is not markup already, so an output is text whatever it holds; control
characters are replaced (``facts.visible``). (Jinja is left to
``registry.rendering``, the one package that imports it.) A page of
thousands of cases stays usable: outputs are cut at ``OUTPUT_CHARS``
characters and the diff compares at most ``worddiff.MAX_TOKENS`` words a
side, each saying so where it happens.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from markupsafe import Markup

from registry.evals.gate import percent
from registry.evals.reports.facts import (
    MARKS,
    judge_digests,
    run_settings,
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
    parts = [_head(run), _header(run), _gate(run), _overview(datasets, two=two)]
    parts += [_section(number, view, two=two) for number, view in enumerate(datasets, start=1)]
    return str(Markup("\n").join([*parts, Markup("</body>\n</html>\n")]))


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
    return tuple(_case_view(comparison, mark, two=two) for comparison, mark in ordered)


def _case_view(comparison: CaseComparison, mark: str, *, two: bool) -> CaseView:
    base, head = comparison.base, comparison.head
    before, after = _output_text(base), _output_text(head)
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
    sides = [_side_view("head", head, head_pieces)]
    if two:
        sides.insert(0, _side_view("base", base, base_pieces))
    written = head or base
    return CaseView(
        case_id=comparison.case_id,
        mark=mark,
        where=written.where if written is not None else "",
        open=mark in MARKS[:4],
        sides=tuple(sides),
        diff_note=diff_note,
    )


def _output_text(case: CaseResult | None) -> str | None:
    run = shown_run(case) if case is not None else None
    if run is None or run.output is None:
        return None
    return visible(run.output[:OUTPUT_CHARS])


def _side_view(name: str, case: CaseResult | None, pieces: tuple[Piece, ...] | None) -> SideView | None:
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


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 96rem; padding: 0 1rem; color: #1f2328; }
h1, h2, h3 { line-height: 1.2; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; margin-top: 2.5rem; }
code, pre { font: 12.5px/1.4 ui-monospace, monospace; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid #d0d7de; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
.verdict, .mark, .status { border-radius: 1em; padding: .05em .6em; font-weight: 600; font-size: .85em; }
.passed, .fixed { background: #dafbe1; color: #116329; }
.failed, .regressed { background: #ffebe9; color: #a40e26; }
.error { background: #fff8c5; color: #7d4e00; }
.unchanged, .added, .removed { background: #eaeef2; color: #424a53; }
.case { border: 1px solid #d0d7de; border-radius: 6px; margin: .5rem 0; padding: .25rem .75rem; }
.case > summary { cursor: pointer; padding: .25rem 0; }
.where, .note, .settings { color: #59636e; }
.sides { display: grid; grid-template-columns: repeat(auto-fit, minmax(24rem, 1fr)); gap: 1rem; }
.output { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; border: 1px solid #d0d7de;
  border-radius: 6px; padding: .5rem; max-height: 30rem; overflow: auto; }
del { background: #ffcecb; text-decoration: line-through; }
ins { background: #aceebb; text-decoration: none; }
.uncompared { color: #59636e; }
.assertions { padding-left: 1.2rem; }
.changed { color: #a40e26; font-weight: 600; }
.digest { font: 12px ui-monospace, monospace; word-break: break-all; }
"""
# Nothing but inline style: no script, no fetch of any kind, even if a value escaped its escaping.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'"
_PIECES = {"deleted": Markup("<del>{}</del>"), "inserted": Markup("<ins>{}</ins>")}
_PIECES["uncompared"] = Markup('<span class="uncompared">{}</span>')


def _head(run: EvalRun) -> Markup:
    verdict = "passed" if run.gate.passed else "failed"
    return Markup(
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>prompt-registry eval: gate {verdict}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        '<h1>prompt-registry eval <span class="verdict {verdict}">gate {verdict}</span></h1>'
    ).format(policy=_POLICY, verdict=verdict, style=Markup(_STYLE))


def _header(run: EvalRun) -> Markup:
    rows = [
        Markup(
            '<tr><th>{}</th><td><code>{}</code></td><td><code>{}</code></td><td class="digest">{}</td><td>{}</td></tr>'
        ).format(pin.side, visible(pin.requested), visible(pin.tag), pin.commit, pin.channel or "")
        for pin in (run.base, run.head)
        if pin is not None
    ]
    parts = [Markup("model <code>{}</code>").format(visible(run.settings.model)), *run_settings(run)]
    if run.settings.changed:
        parts.insert(-1, "only what changed")
    return Markup(
        '<table class="pins">\n<tr><th>side</th><th>requested</th><th>tag</th><th>commit</th><th>channel</th></tr>\n'
        '{rows}\n</table>\n<p class="settings">{settings}</p>'
    ).format(rows=Markup("\n").join(rows), settings=Markup(" · ").join(parts))


def _gate(run: EvalRun) -> Markup:
    gate = run.gate
    rule = Markup("<code>--fail-on {}</code>").format(gate.fail_on)
    if gate.tolerance:
        rule += Markup(", <code>--tolerance {}</code>").format(f"{gate.tolerance:g}")
    heading = Markup("<h2>Gate: {} ({})</h2>").format("passed" if gate.passed else "failed", rule)
    if not gate.reasons:
        return heading
    reasons = Markup("\n").join(Markup("<li>{}</li>").format(visible(reason)) for reason in gate.reasons)
    return heading + Markup("\n<ul>\n{}\n</ul>").format(reasons)


def _overview(datasets: list[DatasetView], *, two: bool) -> Markup:
    if not datasets:
        return Markup("<p>No eval file to run.</p>")
    columns = ["agent", "eval file", "cases", "pass rate", *(["regressed", "fixed"] if two else ["failed"]), "errors"]
    header = Markup("").join(Markup("<th>{}</th>").format(column) for column in columns)
    rows = []
    for number, view in enumerate(datasets, start=1):
        dataset = view.dataset
        base, head = dataset.summary("base"), dataset.summary("head")
        if two:
            flips = [len(dataset.changes("regressed")), len(dataset.changes("fixed"))]
            cells = [f"{base.cases} → {head.cases}", f"{_rate(base)} → {_rate(head)}", *flips]
        else:
            cells = [head.cases, _rate(head), head.failed]
        row = Markup('<tr><td><a href="#dataset-{}">{}</a></td><td><code>{}</code></td>').format(
            number, dataset.agent, visible(dataset.dataset)
        )
        row += Markup("").join(Markup("<td>{}</td>").format(cell) for cell in [*cells, head.errors])
        rows.append(row + Markup("</tr>"))
    body = Markup("\n").join(rows)
    return Markup('<table class="overview">\n<tr>{}</tr>\n{}\n</table>').format(header, body)


def _section(number: int, view: DatasetView, *, two: bool) -> Markup:
    dataset = view.dataset
    picked = f" · picked: {', '.join(dataset.selected)}" if dataset.selected else ""
    parts = [
        Markup('<section id="dataset-{}">\n<h2>{}</h2>').format(number, dataset.agent),
        Markup('<p class="note"><code>{}</code>{}</p>').format(
            visible(dataset.head.eval_file or dataset.dataset), picked
        ),
    ]
    for side in (dataset.base, dataset.head):
        if side is not None and side.problem is not None:
            parts.append(Markup('<p class="failed">Nothing ran on {}: {}</p>').format(side.side, visible(side.problem)))
        if side is not None and not side.complete:
            parts.append(Markup('<p class="note">{}: only the first cases were run (--limit).</p>').format(side.side))
    parts.append(_summary(view, two=two))
    parts += [_case(case) for case in view.cases]
    return Markup("\n").join([*parts, Markup("</section>")])


def _summary(view: DatasetView, *, two: bool) -> Markup:
    header = Markup(
        "<tr><th></th><th>base</th><th>head</th><th>change</th></tr>" if two else "<tr><th></th><th>head</th></tr>"
    )
    rows = [header]
    for row in view.rows:
        cell = Markup('<td class="digest">{}</td>') if row.code else Markup("<td>{}</td>")
        cells = [cell.format(row.base), cell.format(row.head)] if two else [cell.format(row.head)]
        if two:
            changed = Markup('<td class="changed">{}</td>') if row.change == "changed" else Markup("<td>{}</td>")
            cells.append(changed.format(row.change))
        rows.append(Markup("<tr><th>{}</th>{}</tr>").format(visible(row.label), Markup("").join(cells)))
    return Markup('<table class="summary">\n{}\n</table>').format(Markup("\n").join(rows))


def _case(case: CaseView) -> Markup:
    sides = Markup("\n").join(
        _side(side, "base" if n == 0 and len(case.sides) == 2 else "head") for n, side in enumerate(case.sides)
    )
    note = Markup('\n<p class="note">{}</p>').format(case.diff_note) if case.diff_note else Markup("")
    return Markup(
        '<details class="case"{open}>\n<summary><span class="mark {mark}">{mark}</span> <code>{case_id}</code>'
        ' <span class="where">{where}</span></summary>\n<div class="sides">\n{sides}\n</div>{note}\n</details>'
    ).format(
        open=Markup(" open") if case.open else "",
        mark=case.mark,
        case_id=visible(case.case_id),
        where=visible(case.where),
        sides=sides,
        note=note,
    )


def _side(side: SideView | None, name: str) -> Markup:
    if side is None:
        return Markup('<div class="side">\n<h4>{}: not there</h4>\n</div>').format(name)
    parts = [
        Markup('<h4>{}: <span class="status {status}">{status}</span> {}</h4>').format(
            side.side, side.runs_passed, status=side.status
        )
    ]
    if side.reason:
        parts.append(Markup("<p>{}</p>").format(side.reason))
    parts.append(_output(side.output))
    if side.output_note:
        parts.append(Markup('<p class="note">{}</p>').format(side.output_note))
    if side.assertions:
        parts.append(_assertions(side.assertions))
    parts.append(_runs(side.runs))
    return Markup('<div class="side">\n{}\n</div>').format(Markup("\n").join(parts))


def _output(pieces: tuple[Piece, ...] | None) -> Markup:
    if pieces is None:
        return Markup('<p class="note">(no output)</p>')
    shown = Markup("").join(
        _PIECES[piece.kind].format(piece.text) if piece.kind in _PIECES else piece.text for piece in pieces
    )
    return Markup('<pre class="output">{}</pre>').format(shown)


def _assertions(assertions: tuple[AssertionOutcome, ...]) -> Markup:
    items = []
    for assertion in assertions:
        line = Markup('<li><span class="status {status}">{status}</span> {}').format(
            visible(assertion.description), status=assertion.status
        )
        if assertion.reason:
            line += Markup(": {}").format(visible(assertion.reason))
        judge = assertion.judge
        if judge is not None:
            score = judge.score if judge.score is not None else "none"
            line += Markup(" (judge <code>{}</code> <code>{}</code>, score {})").format(
                judge.agent, short_digest(judge.digest), score
            )
        items.append(line + Markup("</li>"))
    return Markup('<ul class="assertions">\n{}\n</ul>').format(Markup("\n").join(items))


def _runs(runs: tuple[RunRecord, ...]) -> Markup:
    header = Markup(
        "<tr><th>run</th><th>status</th><th>outcome</th><th>model calls</th><th>tools</th>"
        "<th>tokens in + out</th><th>seconds</th><th>trace id</th></tr>"
    )
    rows = [header]
    for record in runs:
        outcome = record.outcome + "".join(f": {why}" for why in (record.stopped, record.error) if why)
        tokens = " + ".join("—" if used is None else str(used) for used in (record.input_tokens, record.output_tokens))
        rows.append(
            Markup(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                '<td class="digest">{}</td></tr>'
            ).format(
                record.repeat,
                record.status,
                visible(outcome),
                record.llm_calls,
                ", ".join(record.tool_calls),
                tokens,
                f"{record.seconds:.3f}",
                record.trace_id,
            )  # fmt: skip
        )
    return Markup('<table class="runs">\n{}\n</table>').format(Markup("\n").join(rows))
