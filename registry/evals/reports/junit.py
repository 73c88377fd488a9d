"""The JUnit XML report: an evaluation for GitLab's and GitHub's test report
widgets (GitLab's ``artifacts:reports:junit``; a JUnit action on GitHub).

One ``<testsuite>`` per eval file, named for its agent, and one
``<testcase>`` per case on head (``classname`` the agent, ``name`` the case
id, ``time`` its runs on head added up, ``file`` and ``line`` where it is
written). A case that failed on head has a ``<failure>`` whose message is
the first assertion that did not pass (``regressed (passed on base): ``
before it when it passed on base), its ``type`` that assertion's kind, its
text every run and assertion; one that could not be judged (an outage, a
case that cannot be read) an ``<error>``, never a pass; a case
only base has is ``<skipped>``. An eval file of which nothing ran on head
is one testcase, named for the file, with an ``<error>`` saying why. Each
testcase has the base side's result in ``<properties>`` (``change``,
``base.status`` and why it did not pass, base's tag, commit and digest,
head's digest, each judge's digest on both sides, the trace ids), and its
output in ``<system-out>``; each suite has the pins and digests of both
sides.

The tree is built with ``xml.etree.ElementTree``, which escapes markup;
what XML 1.0 cannot hold at all (most control characters, lone
surrogates, U+FFFE and U+FFFF) is replaced by U+FFFD, so a model's output
never makes the file unreadable.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

from registry.evals.reports.facts import REPLACEMENT, case_seconds, judge_digests, shown_run, why_not_passed
from registry.evals.reports.text import Painter, plain
from registry.evals.results import CaseComparison, CaseResult, DatasetResult, EvalRun, ReleasePin
from registry.models import shorten

MESSAGE_CHARS = 500
OUTPUT_CHARS = 20_000
# What XML 1.0 allows: tab, newline, carriage return, and from U+0020 up, but
# for the surrogates and U+FFFE, U+FFFF (https://www.w3.org/TR/xml/#charsets).
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: object) -> str:
    return _NOT_XML.sub(REPLACEMENT, str(text))


def render_junit(run: EvalRun, paint: Painter = plain) -> str:
    """The run as JUnit XML: one suite per eval file, one testcase per case on head."""
    root = ET.Element("testsuites", name="prompt-registry eval")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for dataset in run.datasets:
        suite = _suite(run, dataset)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, count in totals.items():
        root.set(key, str(count))
    root.set("time", _seconds(run.seconds))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _suite(run: EvalRun, dataset: DatasetResult) -> ET.Element:
    suite = ET.Element("testsuite", name=_xml(dataset.agent))
    properties = ET.SubElement(suite, "properties")
    for name, value in _suite_properties(run, dataset):
        ET.SubElement(properties, "property", name=name, value=_xml(value))
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    seconds = 0.0
    if dataset.head.problem is not None:
        case = ET.SubElement(suite, "testcase", classname=_xml(dataset.agent), name=_xml(dataset.dataset))
        ET.SubElement(case, "error", message=_message(f"nothing ran on head: {dataset.head.problem}"))
        counts["tests"], counts["errors"] = 1, 1
    for comparison in dataset.cases:
        testcase, outcome = _testcase(run.base, dataset, comparison)
        suite.append(testcase)
        counts["tests"] += 1
        counts[outcome] = counts.get(outcome, 0) + 1
        seconds += case_seconds(comparison.head) if comparison.head is not None else 0.0
    for key in ("tests", "failures", "errors", "skipped"):
        suite.set(key, str(counts[key]))
    suite.set("time", _seconds(seconds))
    return suite


def _suite_properties(run: EvalRun, dataset: DatasetResult) -> Iterator[tuple[str, str]]:
    for pin in (run.base, run.head):
        if pin is not None:
            yield from _pin_properties(pin)
    for side in (dataset.base, dataset.head):
        if side is None:
            continue
        yield f"{side.side}.digest", side.digest or ""
        yield f"{side.side}.eval_file", side.eval_file or ""
        yield f"{side.side}.eval_file_id", side.eval_file_id or ""
        if side.problem is not None:
            yield f"{side.side}.problem", side.problem
        if not side.complete:
            yield f"{side.side}.complete", "false (--limit)"
    yield from _judge_properties(dataset)
    if dataset.selected:
        yield "selected", ", ".join(dataset.selected)
    yield "model", run.settings.model


def _pin_properties(pin: ReleasePin) -> Iterator[tuple[str, str]]:
    yield f"{pin.side}.requested", pin.requested
    yield f"{pin.side}.tag", pin.tag
    yield f"{pin.side}.commit", pin.commit


def _judge_properties(dataset: DatasetResult) -> Iterator[tuple[str, str]]:
    for judge in judge_digests(dataset):
        if dataset.base is not None:
            yield f"judge.{judge.agent}.base.digest", judge.base or ""
        yield f"judge.{judge.agent}.head.digest", judge.head or ""


def _testcase(pin: ReleasePin | None, dataset: DatasetResult, comparison: CaseComparison) -> tuple[ET.Element, str]:
    """The case's testcase, and what it counts as: ``passed``, ``failures``, ``errors`` or ``skipped``."""
    head, base = comparison.head, comparison.base
    written = head or base
    where = written.where if written is not None else ""
    testcase = ET.Element("testcase", classname=_xml(dataset.agent), name=_xml(comparison.case_id))
    testcase.set("time", _seconds(case_seconds(head) if head is not None else 0.0))
    file, _, line = where.partition(":")
    if file:
        testcase.set("file", _xml(file))
        testcase.set("line", line.partition(":")[0])
    properties = ET.SubElement(testcase, "properties")
    for name, value in _case_properties(pin, dataset, comparison):
        ET.SubElement(properties, "property", name=name, value=_xml(value))
    if head is None:
        ET.SubElement(testcase, "skipped", message="removed: only base has this case")
        return testcase, "skipped"
    outcome = _verdict(testcase, head, regressed=comparison.change == "regressed")
    run = shown_run(head)
    if run is not None and run.output is not None:
        ET.SubElement(testcase, "system-out").text = _xml(shorten(run.output, OUTPUT_CHARS))
    return testcase, outcome


def _verdict(testcase: ET.Element, head: CaseResult, *, regressed: bool) -> str:
    if head.status == "passed":
        return "passed"
    tag, outcome = ("failure", "failures") if head.status == "failed" else ("error", "errors")
    flipped = "regressed (passed on base): " if regressed else ""
    element = ET.SubElement(testcase, tag, message=_message(flipped + why_not_passed(head)))
    run = shown_run(head)
    if run is not None:
        failing = next((a for a in run.assertions if a.status != "passed"), None)
        element.set("type", "run" if run.error or failing is None else failing.kind)
        element.text = _xml("\n".join(_details(head)))
    else:
        element.set("type", "case")
    return outcome


def _details(case: CaseResult) -> Iterator[str]:
    """Every run of the case: its status, and each assertion's."""
    if case.problem is not None:
        yield f"cannot run: {case.problem}"
    for run in case.runs:
        yield f"run {run.repeat} ({run.label}): {run.status}, {run.outcome}, trace {run.trace_id}"
        if run.error:
            yield f"  error: {run.error}"
        for assertion in run.assertions:
            yield f"  {assertion.status}: {assertion.description}" + (
                f": {assertion.reason}" if assertion.reason else ""
            )


def _case_properties(
    pin: ReleasePin | None, dataset: DatasetResult, comparison: CaseComparison
) -> Iterator[tuple[str, str]]:
    yield "change", comparison.change
    base = comparison.base
    if pin is not None and dataset.base is not None:
        yield "base.status", base.status if base is not None else "absent"
        if base is not None and base.status != "passed":
            yield "base.reason", shorten(why_not_passed(base), MESSAGE_CHARS)
        yield "base.tag", pin.tag
        yield "base.commit", pin.commit
        yield "base.digest", dataset.base.digest or ""
    yield "head.digest", dataset.head.digest or ""
    yield from _judge_properties(dataset)
    head_run = shown_run(comparison.head) if comparison.head is not None else None
    if head_run is not None:
        yield "head.trace_id", head_run.trace_id
    base_run = shown_run(base) if base is not None else None
    if base_run is not None:
        yield "base.trace_id", base_run.trace_id


def _message(text: str) -> str:
    return _xml(shorten(text, MESSAGE_CHARS))


def _seconds(seconds: float) -> str:
    return f"{seconds:.3f}"
