"""The Markdown report: an evaluation sized for a merge request note (a
GitHub comment, a GitLab note).

The title says whether the gate passed and what each side was pinned to
(tag, short commit, the ref as requested); a table gives every eval file's
pass rate base → head. Then per eval file: its pass rate, the judge score's
mean and change (with a 95% bootstrap interval when cases ran more than
once: ``registry.evals.stats``), tokens and latency and how they changed,
then the cases worth a look: regressed, then fixed, outputs side by side in
a table, then errors and failures folded in ``<details>``; last each
side's digest and each judge's, so that a changed judge shows as such.
The note ends with the gate and its reasons.

Everything a model or an author wrote is set as code (``_code``): a code
span when it holds no backtick, pipe or line break, else ``<code>`` around
it escaped (``_text``: HTML's metacharacters as entities, every other ASCII
punctuation character behind a backslash, line breaks as ``<br>``). So
Markdown and HTML in an output are shown as typed, break no table, and
``@name``, ``#123`` and URLs in it mention, reference and link nothing;
control characters are replaced (``facts.visible``). Outputs are cut to
``OUTPUT_CHARS`` characters and ``OUTPUT_LINES`` lines.

The note is at most ``MAX_CHARS`` characters (GitHub refuses a comment of
more than 65,536; GitLab takes a million). When the whole would be longer,
detail goes in this order, and the note says so at its top: first the
outputs of listed cases, from the end of the list (failures, then errors,
then fixed, then regressed cases keep one line each), but for the first
``OUTPUTS_KEPT``; then the cases themselves, from the end likewise ("… 37
more cases in the HTML/JSON report"); then the outputs of the first
cases; then whole eval files, from the last. The title, the table
(``MAX_TABLE_ROWS`` rows) and the gate (``MAX_GATE_REASONS`` reasons)
always stay.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from registry.evals.gate import percent
from registry.evals.reports.facts import (
    MARKS,
    Mark,
    clip,
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
from registry.evals.results import CaseComparison, CaseResult, DatasetResult, EvalRun, ReleasePin, SideSummary
from registry.models import plural, shorten

MAX_CHARS = 60_000
"""The note's size at most: under GitHub's 65,536 with room for a CI job's own heading."""
MAX_TABLE_ROWS = 50
MAX_GATE_REASONS = 30
OUTPUT_CHARS = 400
OUTPUT_LINES = 8
REASON_CHARS = 300
OUTPUTS_KEPT = 10
"""The cases, first in the list, whose outputs are kept before any other case is given a line."""
MORE = "in the HTML/JSON report"
_HEADINGS: dict[Mark, str] = {
    "regressed": "Regressed (passed on base, failed on head)",
    "fixed": "Fixed (failed on base, passed on head)",
    "error": "Errors (could not be judged)",
    "failed": "Failures on head",
    "added": "New",
    "removed": "Removed",
}
_FOLDED: tuple[Mark, ...] = ("error", "failed")
# What CommonMark lets be escaped with a backslash: every ASCII punctuation
# character. Those HTML gives a meaning to become entities instead.
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": "<br>", "\t": " "}
_PUNCTUATION = frozenset("!\"#$%'()*+,-./:;=?@[\\]^_`{|}~")
# A code span shows its text as it is but for a backtick (it ends the span),
# a pipe (it ends a table cell), a line break and leading or trailing spaces.
_SPAN_BREAKERS = re.compile(r"[`|\n]")


def _text(value: object) -> str:
    """``value`` as Markdown that reads as typed: in a table cell, in a list, in ``<code>``."""
    out = []
    for char in visible(str(value)):
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char in _PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _code(value: object) -> str:
    """``value`` as code, so that no mention, reference or link is made of
    it: a code span, where nothing is interpreted, when it can hold it as it
    is; else ``<code>`` around it escaped."""
    text = visible(str(value))
    if text and text == text.strip() and not _SPAN_BREAKERS.search(text):
        return f"`{text}`"
    return f"<code>{_text(text)}</code>"


@dataclass
class _Listed:
    """One case to list, in full (its outputs side by side) or in one line."""

    mark: Mark
    full: str
    brief: str
    with_outputs: bool = False
    shown: bool = False


@dataclass
class _Section:
    """One eval file: what is always said of it, and its cases to list."""

    intro: str
    outro: str
    listed: list[_Listed]
    shown: bool = False


def render_markdown(run: EvalRun, paint: Painter = plain) -> str:
    """The note, at most ``MAX_CHARS`` characters, ending with the gate."""
    top, gate = _top(run), _gate(run)
    sections = [_section(dataset, two=run.base is not None) for dataset in run.datasets]
    budget = MAX_CHARS - len(top) - len(gate) - 1_000
    while True:
        _fit(sections, budget)
        note = _assemble(top, sections, gate)
        if len(note) <= MAX_CHARS:
            return note
        if budget < 0:  # nothing left to leave out: a title or gate reasons of absurd length
            return note[: MAX_CHARS - 200].rpartition("\n")[0] + f"\n\n… cut at {MAX_CHARS:,} characters.\n"
        budget -= len(note) - MAX_CHARS + 500


def _fit(sections: list[_Section], budget: int) -> None:
    """Choose what is shown: eval files in order while they fit; the first
    ``OUTPUTS_KEPT`` cases in the order of ``MARKS`` with their outputs, then
    every other in one line while they fit, then their outputs while they fit."""
    for section in sections:
        section.shown = len(section.intro) + len(section.outro) <= budget
        budget -= (len(section.intro) + len(section.outro)) if section.shown else 0
        for listed in section.listed:
            listed.shown = listed.with_outputs = False
    ranked = sorted(
        (listed for section in sections if section.shown for listed in section.listed),
        key=lambda listed: MARKS.index(listed.mark),
    )
    for listed in ranked[:OUTPUTS_KEPT]:
        if len(listed.full) + 1 <= budget:
            listed.shown = listed.with_outputs = True
            budget -= len(listed.full) + 1
    for listed in ranked:
        if listed.shown:
            continue
        if len(listed.brief) + 1 > budget:
            break
        listed.shown, budget = True, budget - len(listed.brief) - 1
    for listed in ranked:
        extra = len(listed.full) - len(listed.brief)
        if listed.shown and extra <= budget:
            listed.with_outputs, budget = True, budget - extra


def _assemble(top: str, sections: list[_Section], gate: str) -> str:
    parts, cut = [top], _Cut()
    for section in sections:
        if not section.shown:
            cut.files += 1
            continue
        parts.append(section.intro)
        parts.extend(_groups(section, cut))
        parts.append(section.outro)
    if cut.files:
        parts.append(f"… {plural(cut.files, 'more eval file')} {MORE}.\n")
    if cut:
        parts.insert(1, cut.note())
    parts.append(gate)
    return "\n".join(parts)


@dataclass
class _Cut:
    """What fitting the note left out."""

    outputs: int = 0
    cases: int = 0
    files: int = 0

    def __bool__(self) -> bool:
        return bool(self.outputs or self.cases or self.files)

    def note(self) -> str:
        left = [f"{plural(self.cases, 'case')} not listed"] if self.cases else []
        left += [f"{self.outputs} listed without their outputs"] if self.outputs else []
        left += [f"{plural(self.files, 'eval file')} not shown"] if self.files else []
        return (
            f"> ✂️ Cut to fit a note of {MAX_CHARS:,} characters: {', '.join(left)};"
            " the HTML and JSON reports have everything.\n"
        )


def _groups(section: _Section, cut: _Cut) -> Iterator[str]:
    for mark in MARKS:
        group = [listed for listed in section.listed if listed.mark == mark]
        if not group:
            continue
        shown = [listed.full if listed.with_outputs else listed.brief for listed in group if listed.shown]
        cut.outputs += sum(listed.shown and not listed.with_outputs for listed in group)
        left = len(group) - len(shown)
        cut.cases += left
        body = "\n".join([*shown, *([f"… {plural(left, 'more case')} {MORE}.\n"] if left else [])])
        heading = f"{_HEADINGS[mark]}: {len(group)}"
        if mark in _FOLDED:
            yield f"<details><summary>{heading}</summary>\n\n{body}\n</details>\n"
        else:
            yield f"#### {heading}\n\n{body}"


def _top(run: EvalRun) -> str:
    verdict = "✅ gate passed" if run.gate.passed else "❌ gate failed"
    sides = _pin(run.head) if run.base is None else f"{_pin(run.base)} → {_pin(run.head)}"
    lines = [f"## prompt-registry eval: {verdict}", "", sides + "  ", f"<sub>{_settings(run)}</sub>", ""]
    if not run.datasets:
        lines.append("No eval file to run" + (" changed." if run.settings.changed else "."))
        return "\n".join(lines) + "\n"
    lines.extend(_table(run))
    return "\n".join(lines) + "\n"


def _pin(pin: ReleasePin) -> str:
    requested = f", requested as {_code(pin.requested)}" if pin.requested not in (pin.tag, "") else ""
    return f"**{pin.side}** {_code(pin.tag)} at {_code(pin.commit[:12])}{requested}"


def _settings(run: EvalRun) -> str:
    return " · ".join([f"model {_code(run.settings.model)}", *run_settings(run)])


def _table(run: EvalRun) -> list[str]:
    two = run.base is not None
    columns = ["agent", "cases", "pass rate", *(["regressed", "fixed"] if two else ["failed"]), "errors", "judge score"]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for dataset in run.datasets[:MAX_TABLE_ROWS]:
        head = dataset.summary("head")
        if not two:
            cells = [str(head.cases), _rate(head), str(head.failed), str(head.errors), _score(head)]
        else:
            base = dataset.summary("base")
            flips = [str(len(dataset.changes(change))) for change in ("regressed", "fixed")]
            cells = [f"{base.cases} → {head.cases}", _rates(base, head), *flips, str(head.errors), _scores(base, head)]
        lines.append(f"| {_code(dataset.agent)} | " + " | ".join(cells) + " |")
    if len(run.datasets) > MAX_TABLE_ROWS:
        lines.append(f"\n… {plural(len(run.datasets) - MAX_TABLE_ROWS, 'more eval file')} {MORE}.")
    return lines


def _rate(summary: SideSummary) -> str:
    return percent(summary.pass_rate) if summary.pass_rate is not None else "n/a"


def _rates(base: SideSummary, head: SideSummary) -> str:
    rates = f"{_rate(base)} → {_rate(head)}"
    if base.pass_rate is None or head.pass_rate is None or base.pass_rate == head.pass_rate:
        return rates
    points = (head.pass_rate - base.pass_rate) * 100
    return f"{rates} ({'▼' if points < 0 else '▲'} {abs(points):.3g} points)"


def _score(summary: SideSummary) -> str:
    mean = summary.judge_score_mean
    return f"{mean:.2f}" if mean is not None else "—"


def _scores(base: SideSummary, head: SideSummary) -> str:
    before, after = base.judge_score_mean, head.judge_score_mean
    if before is None and after is None:
        return "—"
    if before is None or after is None:
        return f"{_score(base)} → {_score(head)}"
    return f"{before:.2f} → {after:.2f} ({after - before:+.2f})"


def _section(dataset: DatasetResult, *, two: bool) -> _Section:
    listed = [_listed(comparison, mark, two=two) for comparison, mark in worth_a_look(dataset.cases)]
    return _Section(intro="\n".join(_intro(dataset, two=two)) + "\n", outro=_digests(dataset, two=two), listed=listed)


def _intro(dataset: DatasetResult, *, two: bool) -> Iterator[str]:
    head = dataset.summary("head")
    base = dataset.summary("base") if two else None
    yield f"### {_code(dataset.agent)}: " + (_rates(base, head) if base is not None else _rate(head))
    picked = f" · picked: {_text(', '.join(dataset.selected))}" if dataset.selected else ""
    yield f"<sub>{_code(dataset.head.eval_file or dataset.dataset)}{picked}</sub>"
    yield ""
    for side in (dataset.base, dataset.head):
        if side is not None and side.problem is not None:
            yield f"- ⛔ **nothing ran on {side.side}**: {_code(shorten(side.problem, REASON_CHARS))}"
        if side is not None and not side.complete:
            yield f"- {side.side}: only the first cases were run (`--limit`)"
    yield "- " + _cases_line(base, head, dataset)
    yield from _numbers(base, head, dataset)
    for judge in judge_digests(dataset):
        if two and judge.base != judge.head:
            before, after = short_digest(judge.base), short_digest(judge.head)
            yield f"- ⚠️ the judge {_code(judge.agent)} changed ({before} → {after}): score changes may be the judge's"


def _cases_line(base: SideSummary | None, head: SideSummary, dataset: DatasetResult) -> str:
    def cases(summary: SideSummary) -> str:
        errors = f", {plural(summary.errors, 'error')}" if summary.errors else ""
        return f"{summary.passed}/{summary.cases} passed{errors}"

    if base is None:
        return f"**cases** {cases(head)} · **pass rate** {_rate(head)}"
    flips = [f"{len(found)} {name}" for name in ("regressed", "fixed") if (found := dataset.changes(name))]
    flipped = f" ({', '.join(flips)})" if flips else ""
    return f"**cases** {cases(base)} → {cases(head)}{flipped} · **pass rate** {_rates(base, head)}"


def _numbers(base: SideSummary | None, head: SideSummary, dataset: DatasetResult) -> Iterator[str]:
    if head.judge_score_mean is not None or (base is not None and base.judge_score_mean is not None):
        line = f"- **judge score** {_scores(base, head) if base is not None else _score(head)}"
        interval = score_interval(dataset)
        if interval is not None:
            line += (
                f", {interval.confidence:.0%} interval of the change {interval.low:+.2f} to {interval.high:+.2f}"
                f" ({plural(interval.cases, 'case')} resampled {interval.resamples} times)"
            )
        yield line
    tokens, latency = _tokens(base, head), _latency(base, head)
    if tokens or latency:
        yield "- " + " · ".join(part for part in (tokens, latency) if part)


def _tokens(base: SideSummary | None, head: SideSummary) -> str:
    def used(summary: SideSummary) -> str:
        return f"{summary.input_tokens or 0} in + {summary.output_tokens or 0} out"

    def per_run(summary: SideSummary) -> float | None:
        if summary.input_tokens is None and summary.output_tokens is None or not summary.runs:
            return None
        return ((summary.input_tokens or 0) + (summary.output_tokens or 0)) / summary.runs

    if per_run(head) is None and (base is None or per_run(base) is None):
        return ""
    if base is None:
        return f"**tokens** {used(head)}"
    return f"**tokens** {used(base)} → {used(head)}{_relative(per_run(base), per_run(head), 'per run')}"


def _latency(base: SideSummary | None, head: SideSummary) -> str:
    after = seconds_per_run(head)
    before = seconds_per_run(base) if base is not None else None

    def shown(seconds: float | None) -> str:
        return f"{seconds:.3f} s" if seconds is not None else "n/a"

    if after is None and before is None:
        return ""
    if base is None:
        return f"**latency** {shown(after)}/run"
    return f"**latency** {shown(before)} → {shown(after)}/run{_relative(before, after, '')}"


def _relative(before: float | None, after: float | None, what: str) -> str:
    if before is None or after is None or not before:
        return ""
    change = (after - before) / before
    shown = f"{change:+.0%}" if abs(change) >= 0.005 else "±0%"
    return f" ({shown}{' ' + what if what else ''})"


def _listed(comparison: CaseComparison, mark: Mark, *, two: bool) -> _Listed:
    case = comparison.head or comparison.base
    assert case is not None  # a comparison is of a case on at least one side
    where = f" {_code(case.where)}" if case.where else ""
    reason = why_not_passed(comparison.head) if comparison.head is not None else "removed on head"
    brief = (
        f"- **{_code(comparison.case_id)}**{where}: {_code(shorten(reason, REASON_CHARS)) if reason else 'passed'}\n"
    )
    sides = [("base", comparison.base), ("head", comparison.head)] if two else [("head", comparison.head)]
    rows = [f"| | {' | '.join(name for name, _ in sides)} |", "|---" * (len(sides) + 1) + "|"]
    for label, cell in (("status", _status), ("why", _why), ("output", _output)):
        rows.append(f"| {label} | " + " | ".join(cell(side) for _, side in sides) + " |")
    full = f"**{_code(comparison.case_id)}**{where}\n\n" + "\n".join(rows) + "\n"
    return _Listed(mark=mark, full=full, brief=brief)


def _status(case: CaseResult | None) -> str:
    if case is None:
        return "not there"
    repeats = runs_passed(case)
    return f"**{case.status}**" + (f" ({repeats})" if repeats else "")


def _why(case: CaseResult | None) -> str:
    reason = why_not_passed(case) if case is not None else ""
    return _code(shorten(reason, REASON_CHARS)) if reason else ""


def _output(case: CaseResult | None) -> str:
    run = shown_run(case) if case is not None else None
    if run is None or run.output is None:
        return "*(no output)*"
    return _code(clip(run.output, chars=OUTPUT_CHARS, lines=OUTPUT_LINES))


def _digests(dataset: DatasetResult, *, two: bool) -> str:
    sides = [side for side in (dataset.base, dataset.head) if side is not None and (two or side.side == "head")]
    header = "| | " + " | ".join(side.side for side in sides) + " |"
    rows = [header, "|---" * (len(sides) + 1) + "|"]
    rows.append(
        f"| agent {_code(dataset.agent)} | " + " | ".join(_code(side.digest or "none") for side in sides) + " |"
    )
    for judge in judge_digests(dataset):
        digests = {"base": judge.base, "head": judge.head}
        cells = " | ".join(_code(digests[side.side] or "none") for side in sides)
        rows.append(f"| judge {_code(judge.agent)} | {cells} |")
    files = " | ".join(_code(side.eval_file_id or "none") for side in sides)
    rows.append(f"| eval file (blob) | {files} |")
    return "<details><summary>Digests</summary>\n\n" + "\n".join(rows) + "\n\n</details>\n"


def _gate(run: EvalRun) -> str:
    gate = run.gate
    rule = f"`--fail-on {gate.fail_on}`" + (f", `--tolerance {gate.tolerance:g}`" if gate.tolerance else "")
    if gate.passed:
        return f"### ✅ Gate passed ({rule})\n"
    lines = [f"### ❌ Gate failed ({rule})", ""]
    lines += [f"- {_code(shorten(reason, REASON_CHARS))}" for reason in gate.reasons[:MAX_GATE_REASONS]]
    if len(gate.reasons) > MAX_GATE_REASONS:
        lines.append(f"- … {plural(len(gate.reasons) - MAX_GATE_REASONS, 'more reason')} {MORE}")
    return "\n".join(lines) + "\n"
