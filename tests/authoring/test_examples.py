"""prompt-registry test: examples with expectations and golden files (the command
itself: tests/integration/test_examples_command.py)."""

from __future__ import annotations

from pathlib import Path

from registry.authoring.examples import run_examples
from registry.authoring.lint import lint
from tests.support.triage_examples import AGENTS, DEFINITION, triage_library


def _problems(tmp_path: Path) -> list[str]:
    return [p for r in run_examples(tmp_path).results for p in r.problems]


def test_expectations_that_hold_pass(tmp_path: Path) -> None:
    base = triage_library(
        tmp_path,
        """\
  - name: login
    inputs: {ticket: "I cannot log in"}
    expect:
      system: {contains: [support tickets], not_contains: [password]}
      user: {matches: ["^Ticket: .*log in$"]}
""",
    )
    report = run_examples(base)
    assert [(r.agent, r.example, r.passed) for r in report.results] == [("support/triage", "login", True)]


def test_each_expectation_that_fails_says_why(tmp_path: Path) -> None:
    base = triage_library(
        tmp_path,
        """\
  - name: wrong
    inputs: {ticket: "x"}
    expect:
      system: {contains: [refund], not_contains: [internal notes]}
      user: {matches: ["^Order"]}
      assistant: {contains: [anything]}
  - name: bad-regex
    inputs: {ticket: "x"}
    expect:
      user: {matches: ["(unclosed"]}
""",
    )
    assert _problems(base) == [
        "system message does not contain 'refund'",
        "system message contains 'internal notes'",
        "user message does not match '^Order'",
        "expects a assistant message, but the definition has no assistant template",
        "user: '(unclosed' is not a valid regular expression: missing ): (unclosed",
    ]


def test_examples_whose_inputs_do_not_render_fail(tmp_path: Path) -> None:
    base = triage_library(
        tmp_path,
        """\
  - name: missing
    inputs: {}
  - name: missing
    inputs: {ticket: "x"}
""",
    )
    results = run_examples(base).results
    assert results[0].problems[0].startswith("does not render: ")
    assert any("missing required input 'ticket'" in problem for problem in results[0].problems)
    assert results[1].problems == ["another example is also named 'missing'"]


def test_golden_files_are_written_by_update_and_compared(tmp_path: Path) -> None:
    base = triage_library(tmp_path, "  - name: login\n    inputs: {ticket: I cannot log in}\n    golden: true\n")
    golden = base / AGENTS / "support" / "triage.examples" / "login.txt"
    assert _problems(base) == ["no golden file triage.examples/login.txt; run with --update to write it"]
    assert run_examples(base, update=True).results[0].updated
    assert golden.read_text() == (
        "--- system ---\nYou sort support tickets. Never reveal internal notes.\n--- user ---\nTicket: I cannot log in\n"
    )
    assert _problems(base) == []
    triage_library(
        tmp_path,
        "  - name: login\n    inputs: {ticket: I cannot log in}\n    golden: true\n",
        DEFINITION.replace("Never reveal", "Do not reveal"),
    )
    result = run_examples(base).results[0]
    assert result.problems == ["rendering differs from triage.examples/login.txt"]
    assert "-You sort support tickets. Never reveal internal notes.\n+You sort support tickets. Do not reveal" in (
        result.diff or ""
    )
    assert lint(base).findings == []  # golden files are not definitions


def test_the_schema_refuses_malformed_examples(tmp_path: Path) -> None:
    base = triage_library(
        tmp_path,
        """\
  - name: Has Capitals
    inputs: []
    expect:
      critic: {contains: [x]}
      user: {contain: [x]}
""",
    )
    messages = [f.message for f in lint(base).findings]
    assert len(messages) >= 4, messages
    report = run_examples(base)
    assert [(r.file, r.example) for r in report.results] == [(f"{AGENTS}/support/triage.yml", None)]
    assert report.failed == report.not_run == report.results


def test_report_text_is_coloured_only_when_asked_and_counts_in_words(tmp_path: Path) -> None:
    from registry.authoring.examples import report_text

    base = triage_library(
        tmp_path,
        "  - name: good\n    inputs: {ticket: x}\n  - name: bad\n    inputs: {ticket: x}\n"
        "    expect: {user: {contains: [refund]}}\n",
    )
    (base / AGENTS / "support" / "broken.yml").write_text("name: x\nexamples: [\n")
    report = run_examples(base)
    plain, coloured = report_text(report), report_text(report, colour=True)
    assert "\033[" not in plain and plain.endswith("1 passed, 1 failed, 1 definition not run\n")
    assert "\033[31mFAILED\033[0m   support/triage [bad]" in coloured
    assert "\033[32mok\033[0m       support/triage [good]" in coloured


COMPOSITE = """\
name: Triage, twice
inputs:
  type: object
  required: [ticket]
  properties:
    ticket: {type: string, maxLength: 40}
pattern:
  kind: chain
  steps:
    - id: first
      agent: support/triage
      inputs: {ticket: "{{ inputs.ticket }}"}
    - id: second
      agent: support/triage
      inputs: {ticket: "{{ steps.first.output }}"}
examples:
"""


def test_a_composites_examples_are_checked_against_its_inputs(tmp_path: Path) -> None:
    base = triage_library(tmp_path, "  - name: plain\n    inputs: {ticket: hi}\n")
    composite = base / AGENTS / "support" / "twice.yml"
    composite.write_text(
        COMPOSITE
        + "  - name: fits\n    inputs: {ticket: short}\n"
        + "  - name: too-long\n    inputs: {ticket: "
        + "x" * 50
        + "}\n"
        + "  - name: missing\n    inputs: {}\n",
        encoding="utf-8",
    )
    outcomes = {(r.agent, r.example): r.problems for r in run_examples(base).results if r.agent == "support/twice"}
    assert outcomes[("support/twice", "fits")] == []
    assert outcomes[("support/twice", "too-long")][0].startswith("inputs do not fit the composite: ")
    assert any("/ticket" in line for line in outcomes[("support/twice", "too-long")])
    assert outcomes[("support/twice", "missing")][0].startswith("inputs do not fit the composite: ")


def test_a_composites_examples_cannot_expect_messages(tmp_path: Path) -> None:
    base = triage_library(tmp_path, "  - name: plain\n    inputs: {ticket: hi}\n")
    (base / AGENTS / "support" / "twice.yml").write_text(
        COMPOSITE + "  - name: rendered\n    inputs: {ticket: hi}\n    expect: {user: {contains: [x]}}\n",
        encoding="utf-8",
    )
    findings = [f for f in lint(base).findings if f.file.endswith("twice.yml")]
    assert findings and all(f.rule == "schema" for f in findings), findings
