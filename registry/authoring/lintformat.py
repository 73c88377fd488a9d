"""Writing a ``LintReport`` for people and for CI: text, JSON, JUnit XML and
GitLab Code Quality."""

from __future__ import annotations

import hashlib
import json
from xml.etree import ElementTree

from registry.authoring.colour import paint
from registry.authoring.lintreport import RULES, Finding, LintReport
from registry.models import location, plural

FORMATS = ("text", "json", "junit", "codequality")


def render_report(report: LintReport, output_format: str, *, colour: bool = False) -> str:
    if output_format == "json":
        return as_json(report)
    if output_format == "junit":
        return as_junit(report)
    if output_format == "codequality":
        return as_codequality(report)
    return as_text(report, colour=colour)


def as_text(report: LintReport, *, colour: bool = False) -> str:
    """``file:line:column: severity [rule] message``, a hint under each, and a summary."""

    def style(text: str, name: str) -> str:
        return paint(text, name, colour=colour)

    lines = []
    for finding in report.findings:
        where = location(finding.file, finding.line, finding.column)
        severity = style(finding.severity, finding.severity)
        lines.append(f"{style(where, 'bold')}: {severity} [{finding.rule}] {finding.message}")
        if finding.hint:
            lines.append(style(f"    hint: {finding.hint}", "dim"))
    checked = f"{plural(len(report.definitions), 'definition')} and {plural(len(report.partials), 'partial')}"
    if report.evals:
        checked = checked.replace(" and ", ", ") + f" and {plural(len(report.evals), 'eval file')}"
    if report.findings:
        summary = f"{plural(report.errors, 'error')}, {plural(report.warnings, 'warning')} in {checked}"
        lines.append(style(summary, "error" if report.errors else "warning"))
    else:
        lines.append(f"no problems in {checked}")
    return "\n".join(lines) + "\n"


def as_json(report: LintReport) -> str:
    body = {
        "root": report.root,
        "summary": {
            "definitions": len(report.definitions),
            "partials": len(report.partials),
            "evals": len(report.evals),
            "errors": report.errors,
            "warnings": report.warnings,
        },
        "findings": [f.as_dict() for f in report.findings],
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def as_junit(report: LintReport) -> str:
    """One test case per file (definitions, partials and eval files); each
    error a failure. Warnings are written to the case's system-out, so CI
    shows them without failing the report."""
    files = sorted({*report.definitions, *report.partials, *report.evals, *(f.file for f in report.findings)})
    suite = ElementTree.Element(
        "testsuite",
        name="prompt-registry lint",
        tests=str(len(files)),
        failures=str(len({f.file for f in report.findings if f.severity == "error"})),
        errors="0",
    )
    for file in files:
        case = ElementTree.SubElement(suite, "testcase", classname="lint", name=file)
        findings = report.findings_for(file)
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            failure = ElementTree.SubElement(case, "failure", message=errors[0].message, type=errors[0].rule)
            failure.text = "\n".join(_line(f) for f in errors)
        warnings = [f for f in findings if f.severity == "warning"]
        if warnings:
            ElementTree.SubElement(case, "system-out").text = "\n".join(_line(f) for f in warnings)
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def as_codequality(report: LintReport) -> str:
    """GitLab Code Quality (a Code Climate subset): findings appear in the
    merge request widget. Errors are ``major``, warnings ``minor``."""
    issues = []
    for finding in report.findings:
        fingerprint = hashlib.sha256(
            f"{finding.rule}\0{finding.file}\0{finding.path}\0{finding.message}".encode()
        ).hexdigest()
        issues.append(
            {
                "type": "issue",
                "check_name": finding.rule,
                "description": f"{finding.message} ({RULES[finding.rule].summary})",
                "categories": ["Bug Risk" if finding.severity == "error" else "Style"],
                "severity": "major" if finding.severity == "error" else "minor",
                "fingerprint": fingerprint,
                "location": {"path": finding.file, "lines": {"begin": finding.line or 1}},
            }
        )
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"


def _line(finding: Finding) -> str:
    where = location(finding.file, finding.line, finding.column)
    return f"{where}: [{finding.rule}] {finding.message}"
