"""The gate: whether an evaluation lets a change through (``--fail-on``).

- ``never``: it always does (a report, not a gate).
- ``failure``: it does not when any case fails on head.
- ``regression`` (the default): it does not when a case that passed on base
  fails on head, or when a dataset's pass rate (runs passed among those that
  passed or failed) fell by more than ``tolerance`` (0.05: five points).

Under ``failure`` and ``regression`` alike, what could not be judged on
head stops the gate too: a case that is ``error`` (a model or judge outage,
a case that cannot be read), and an eval file of which nothing ran (its
agent is invalid on head, its file cannot be read). An error is never
counted as a pass. Base's errors are reported, but do not stop the gate:
what is gated is head.
"""

from __future__ import annotations

from collections.abc import Sequence

from registry.evals.assertions import ERROR, FAILED
from registry.evals.results import CaseComparison, DatasetResult, FailOn, Gate
from registry.models import plural, shorten

FAIL_ON: tuple[FailOn, ...] = ("regression", "failure", "never")
_SHOWN_IDS = 5
# Pass rates are ratios of small counts: a fall equal to the tolerance is
# not "more than" it, whatever the float rounding says.
_EPSILON = 1e-9


def judge_gate(datasets: Sequence[DatasetResult], fail_on: FailOn, tolerance: float = 0.0) -> Gate:
    """The gate's verdict on ``datasets``: the reasons it does not pass, one line each."""
    reasons: list[str] = []
    if fail_on != "never":
        for dataset in datasets:
            reasons.extend(_reasons(dataset, fail_on, tolerance))
    return Gate(fail_on, tolerance, tuple(reasons))


def _reasons(dataset: DatasetResult, fail_on: FailOn, tolerance: float) -> list[str]:
    name = dataset.dataset
    if dataset.head.problem is not None:
        return [f"{name}: nothing ran on head: {dataset.head.problem}"]
    reasons = []
    errors = [c for c in dataset.cases if c.head is not None and c.head.status == ERROR]
    if errors:
        reasons.append(f"{name}: {plural(len(errors), 'case')} could not be judged on head (error): {_ids(errors)}")
    if fail_on == "failure":
        failed = [c for c in dataset.cases if c.head is not None and c.head.status == FAILED]
        if failed:
            reasons.append(f"{name}: {plural(len(failed), 'case')} failed on head: {_ids(failed)}")
        return reasons
    regressed = dataset.changes("regressed")
    if regressed:
        reasons.append(f"{name}: {plural(len(regressed), 'case')} passed on base and failed on head: {_ids(regressed)}")
    before, after = dataset.summary("base").pass_rate, dataset.summary("head").pass_rate
    if dataset.base is not None and before is not None and after is not None and before - after > tolerance + _EPSILON:
        reasons.append(
            f"{name}: the pass rate fell from {percent(before)} to {percent(after)},"
            f" more than the tolerance of {percent(tolerance)}"
        )
    return reasons


def _ids(cases: Sequence[CaseComparison]) -> str:
    shown = ", ".join(case.case_id for case in cases[:_SHOWN_IDS])
    more = f" and {len(cases) - _SHOWN_IDS} more" if len(cases) > _SHOWN_IDS else ""
    return shorten(shown, 200) + more


def percent(rate: float) -> str:
    """``0.5`` as ``50%``, ``0.125`` as ``12.5%``."""
    return f"{rate * 100:.4g}%"
