"""The text report: an evaluation on a terminal.

Per eval file, the agent and why it was picked, each side's digest, cases
and pass rate base → head, tokens, latency and judge scores; then the cases
worth a look, the ones that changed first (regressed, fixed), then the
errors and the failures, each with the reason of its first assertion that
did not pass and its outputs; last, the gate and why it did not pass.
Passing cases are counted, not listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from registry.evals.gate import percent
from registry.evals.reports.facts import (
    judge_digests,
    run_settings,
    runs_passed,
    short_digest,
    shown_run,
    visible,
    why_not_passed,
    worth_a_look,
)
from registry.evals.results import (
    CaseResult,
    DatasetResult,
    EvalRun,
    ReleasePin,
    SideSummary,
)
from registry.models import shorten

Painter = Callable[[str, str], str]
"""Styles ``text`` (the first argument) as the second says: ``bold``,
``dim``, ``added``, ``removed``, ``error`` or ``warning``."""

MAX_CASES_SHOWN = 20
"""Cases listed per eval file; the rest are counted (``--format json`` has them all)."""
_OUTPUT_WIDTH = 160
_MARKS = {
    "regressed": ("✗ regressed", "removed"),
    "fixed": ("✓ fixed", "added"),
    "error": ("! error", "warning"),
    "failed": ("✗ failed", "error"),
    "added": ("+ new", "bold"),
    "removed": ("- removed", "dim"),
}


def plain(text: str, style: str) -> str:
    """No styling: for files and pipes."""
    return text


def render_text(run: EvalRun, paint: Painter = plain) -> str:
    """The whole report, ending with the gate."""
    lines = [_title(run, paint), _settings_line(run), ""]
    for dataset in run.datasets:
        lines.extend(_dataset_lines(dataset, paint))
        lines.append("")
    if not run.datasets:
        lines += ["no eval file to run" + (" changed" if run.settings.changed else ""), ""]
    lines.extend(_gate_lines(run, paint))
    return "\n".join(lines) + "\n"


def _title(run: EvalRun, paint: Painter) -> str:
    head = _pin(run.head)
    if run.base is None:
        return paint(f"eval {head}", "bold")
    return paint(f"eval {_pin(run.base)} → {head}", "bold")


def _pin(pin: ReleasePin) -> str:
    requested = f"{pin.requested} = " if pin.requested not in (pin.tag, "") else ""
    return f"{pin.side} {requested}{pin.tag} ({pin.commit[:12]})"


def _settings_line(run: EvalRun) -> str:
    return " · ".join([f"model {run.settings.model}", *run_settings(run)])


def _dataset_lines(dataset: DatasetResult, paint: Painter) -> Iterator[str]:
    why = f"  [{', '.join(dataset.selected)}]" if dataset.selected else ""
    yield paint(f"{dataset.agent}", "bold") + f"  {dataset.head.eval_file or dataset.dataset}{why}"
    yield "  " + _digests(dataset)
    for side in (dataset.base, dataset.head):
        if side is not None and side.problem is not None:
            yield "  " + paint(f"nothing ran on {side.side}: {side.problem}", "error")
        if side is not None and not side.complete:
            yield "  " + paint(f"{side.side}: only the first cases were run (--limit)", "dim")
    head = dataset.summary("head")
    base = dataset.summary("base") if dataset.base is not None else None
    yield "  " + _counts_line(base, head, dataset)
    extra = _usage_line(base, head)
    if extra:
        yield "  " + extra
    yield from _case_lines(dataset, paint)


def _digests(dataset: DatasetResult) -> str:
    """The agent's digest on each side, and each judge's: ``a → b`` when they differ."""
    base, head = dataset.base, dataset.head
    parts = [f"digest {_change(base.digest if base is not None else None, head.digest, two=base is not None)}"]
    for judge in judge_digests(dataset):
        parts.append(f"judge {judge.agent} {_change(judge.base, judge.head, two=base is not None)}")
    return " · ".join(parts)


def _change(before: str | None, after: str | None, *, two: bool) -> str:
    if not two:
        return short_digest(after)
    return (
        f"{short_digest(after)} (unchanged)" if before == after else f"{short_digest(before)} → {short_digest(after)}"
    )


def _counts_line(base: SideSummary | None, head: SideSummary, dataset: DatasetResult) -> str:
    def cases(summary: SideSummary) -> str:
        errors = f", {summary.errors} error{'s' if summary.errors != 1 else ''}" if summary.errors else ""
        return f"{summary.passed}/{summary.cases} passed{errors}"

    def rate(summary: SideSummary) -> str:
        return percent(summary.pass_rate) if summary.pass_rate is not None else "n/a"

    if base is None:
        return f"cases {cases(head)} · pass rate {rate(head)}"
    changes = [f"{len(found)} {name}" for name in ("regressed", "fixed") if (found := dataset.changes(name))]
    changed = f" ({', '.join(changes)})" if changes else ""
    return f"cases {cases(base)} → {cases(head)}{changed} · pass rate {rate(base)} → {rate(head)}"


def _tokens(summary: SideSummary) -> str | None:
    if summary.input_tokens is None and summary.output_tokens is None:
        return None
    return f"{summary.input_tokens or 0} in + {summary.output_tokens or 0} out"


def _latency(summary: SideSummary) -> str | None:
    return f"{summary.seconds / summary.runs:.2f} s/run" if summary.runs else None


def _judge_score(summary: SideSummary) -> str | None:
    mean = summary.judge_score_mean
    return f"{mean:.2f}" if mean is not None else None


_USAGE: tuple[tuple[str, Callable[[SideSummary], str | None]], ...] = (
    ("tokens", _tokens),
    ("latency", _latency),
    ("judge score", _judge_score),
)


def _usage_line(base: SideSummary | None, head: SideSummary) -> str:
    parts = []
    for label, value in _USAGE:
        after = value(head)
        before = value(base) if base is not None else None
        if after is None and before is None:
            continue
        parts.append(f"{label} {before or 'n/a'} → {after or 'n/a'}" if base is not None else f"{label} {after}")
    return " · ".join(parts)


def _case_lines(dataset: DatasetResult, paint: Painter) -> Iterator[str]:
    shown = worth_a_look(dataset.cases)
    for comparison, mark in shown[:MAX_CASES_SHOWN]:
        label, style = _MARKS[mark]
        where = comparison.head.where if comparison.head is not None else ""
        yield f"  {paint(label, style)}  {comparison.case_id}" + (paint(f"  {where}", "dim") if where else "")
        for side, case in (("base", comparison.base), ("head", comparison.head)):
            if case is not None and (side == "head" or dataset.base is not None):
                yield from _side_lines(side, case, paint)
    if len(shown) > MAX_CASES_SHOWN:
        yield f"  ... and {len(shown) - MAX_CASES_SHOWN} more (--format json lists every case)"


def _side_lines(side: str, case: CaseResult, paint: Painter) -> Iterator[str]:
    prefix = f"      {side}: {case.status}"
    if case.problem is not None:
        yield f"{prefix}: {case.problem}"
        return
    run = shown_run(case)
    if run is None:
        yield prefix
        return
    repeats = f" ({runs_passed(case)})" if len(case.runs) > 1 else ""
    reason = why_not_passed(case)
    yield f"{prefix}{repeats}" + (f": {shorten(reason, 200)}" if reason else "")
    output = "(no output)" if run.output is None else shorten(" ".join(visible(run.output).split()), _OUTPUT_WIDTH)
    yield paint(f"        output: {output}", "dim")


def _gate_lines(run: EvalRun, paint: Painter) -> Iterator[str]:
    gate = run.gate
    rule = f"--fail-on {gate.fail_on}" + (f", --tolerance {gate.tolerance:g}" if gate.tolerance else "")
    if gate.passed:
        yield paint(f"gate passed ({rule})", "added")
        return
    yield paint(f"gate failed ({rule}):", "error")
    for reason in gate.reasons:
        yield f"  {reason}"
