"""Lint over eval files: their format, the agent, case inputs and judges
checked against the library, each finding at its file, line and column."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

from registry.authoring.lint import lint
from registry.authoring.lintevals import MAX_FINDINGS
from registry.authoring.lintformat import as_json, as_junit, as_text
from registry.authoring.lintreport import Finding, LintReport
from tests.conftest import MINIMAL
from tests.support.lint_libraries import EVALS, GOOD, write_library

JUDGE = """\
name: Judge
prompt_templates:
  user: "{{ inputs | tojson }} {{ answer }} {{ expectation }}"
inputs: {type: object, required: [inputs, answer], properties: {inputs: {type: object}, answer: {type: string}, expectation: {type: string}}}
output_parser:
  type: json
  output_schema:
    type: object
    required: [score, pass, reason]
    properties: {score: {type: number}, pass: {type: boolean}, reason: {type: string}}
"""
TRIAGE_EVAL = "../evals/chat/with_rules.yml"
TRIAGE_FILE = f"{EVALS}/chat/with_rules.yml"


def _lint(tmp_path: Path, evals: dict[str, str], **agents: str) -> LintReport:
    files: dict[str, str | bytes] = {**GOOD, "evals/judge.yml": JUDGE, **{f"{k}.yml": v for k, v in agents.items()}}
    return lint(write_library(tmp_path, {**files, **evals}))


def _only(report: LintReport) -> Finding:
    assert len(report.findings) == 1, report.findings
    return report.findings[0]


def test_a_good_eval_file_lints_clean_and_is_counted(tmp_path: Path) -> None:
    text = (
        "defaults:\n  expect: [{judge: evals/judge}]\n"
        "cases:\n"
        "  - id: one\n    inputs: {question: Why?, rules: [Be brief.]}\n"
        "    expect: [{contains: x}, {judge: {agent: evals/judge, min_score: 0.5}}]\n"
    )
    report = _lint(
        tmp_path, {TRIAGE_EVAL: text, "../evals/chat/minimal.yml": "cases: [{id: a, inputs: {question: q}}]\n"}
    )
    assert report.findings == []
    assert report.evals == [f"{EVALS}/chat/minimal.yml", TRIAGE_FILE]
    assert as_text(report).endswith("no problems in 3 definitions, 1 partial and 2 eval files\n")
    assert '"evals": 2' in as_json(report)
    names = [case.get("name") for case in ElementTree.fromstring(as_junit(report)).iter("testcase")]
    assert TRIAGE_FILE in names


def test_an_input_the_agent_does_not_declare_is_an_error_with_did_you_mean(tmp_path: Path) -> None:
    text = "cases:\n  - id: one\n    inputs: {questoin: Why?, rules: []}\n"
    missing, undeclared = _lint(tmp_path, {TRIAGE_EVAL: text}).findings
    assert (undeclared.rule, undeclared.file, undeclared.line, undeclared.column) == ("eval-inputs", TRIAGE_FILE, 3, 14)
    assert undeclared.message == "case 'one': chat/with_rules takes no input 'questoin'; did you mean 'question'?"
    assert undeclared.hint == "did you mean 'question'?"
    assert (missing.line, missing.message) == (3, "case 'one': missing required input 'question'")


def test_inputs_that_fail_the_agents_schema_are_errors_at_their_line(tmp_path: Path) -> None:
    text = "cases:\n  - id: one\n    inputs:\n      question: ''\n      rules: not a list\n  - {id: two, inputs: {rules: []}}\n"
    report = _lint(tmp_path, {TRIAGE_EVAL: text})
    assert [(f.rule, f.line, f.message) for f in report.findings] == [
        ("eval-inputs", 4, "case 'one': '' should be non-empty"),
        ("eval-inputs", 5, "case 'one': 'not a list' is not of type 'array'"),
        ("eval-inputs", 6, "case 'two': missing required input 'question'"),
    ]


def test_an_agent_without_an_inputs_schema_takes_what_its_templates_read(tmp_path: Path) -> None:
    text = "cases:\n  - {id: one, inputs: {question: q, extra: x}}\n  - {id: two}\n"
    report = _lint(tmp_path, {"../evals/chat/minimal.yml": text})
    assert [(f.line, f.message) for f in report.findings] == [
        (2, "case 'one': chat/minimal takes no input 'extra'"),
        (3, "case 'two': chat/minimal needs input 'question' (its templates read it)"),
    ]


def test_a_rag_agent_needs_no_passages_from_a_case_the_executor_fills_them(tmp_path: Path) -> None:
    rag = (
        "name: Docs\ntype: rag\nrag: {retriever: docs, force_retrieval: true}\n"
        "prompt_templates: {user: '{{ question }} {% for p in passages %}{{ p.text }}{% endfor %}'}\n"
        "inputs:\n  type: object\n  required: [question, passages]\n"
        "  properties: {question: {type: string}, passages: {type: array}}\n"
    )
    schemaless = (
        "name: Docs\ntype: rag\nrag: {retriever: docs}\nprompt_templates: {user: '{{ question }} {{ passages }}'}\n"
    )
    evals = {
        "../evals/docs/answer.yml": "cases:\n  - {id: one, inputs: {question: q}}\n",
        "../evals/docs/loose.yml": "cases:\n  - {id: one, inputs: {question: q}}\n  - {id: two, inputs: {}}\n",
    }
    report = _lint(tmp_path, evals, **{"docs/answer": rag, "docs/loose": schemaless})
    assert [(f.file.rsplit("/", 1)[-1], f.message) for f in report.findings] == [
        ("loose.yml", "case 'two': docs/loose needs input 'question' (its templates read it)"),
    ]


def test_an_eval_file_for_an_agent_that_does_not_exist(tmp_path: Path) -> None:
    by_path = _only(_lint(tmp_path / "path", {"../evals/chat/minimall.yml": "cases: [{id: one}]\n"}))
    assert (by_path.rule, by_path.line) == ("eval-agent", 1)
    assert by_path.message == (
        "agent chat/minimall does not exist in this library (the agent its path names); did you mean 'chat/minimal'?"
    )
    named = _only(
        _lint(
            tmp_path / "named", {"../evals/chat/hard.yml": "description: d\nagent: chat/minimall\ncases: [{id: one}]\n"}
        )
    )
    assert (named.rule, named.line, named.column) == ("eval-agent", 2, 8)


def test_a_judge_must_exist_and_be_able_to_judge(tmp_path: Path) -> None:
    text = (
        "defaults: {expect: [{judge: evals/judg}]}\n"
        "cases:\n"
        "  - id: one\n    inputs: {question: q}\n    expect: [{judge: chat/with_rules}, {judge: chat/with_rules}]\n"
        "  - {id: two, inputs: {question: q}, expect: [{judge: {agent: chat/plain, min_score: 0.5}}]}\n"
    )
    plain = (
        MINIMAL + "output_parser: {type: json, output_schema: {type: object, properties: {score: {type: number}}}}\n"
    )
    report = _lint(tmp_path, {"../evals/chat/minimal.yml": text}, **{"chat/plain": plain})
    assert [(f.rule, f.line, f.message) for f in report.findings] == [
        ("eval-judge", 1, "judge evals/judg is not an agent of this library; did you mean 'evals/judge'?"),
        (
            "eval-judge",
            5,
            "judge chat/with_rules cannot judge: its output_parser is not of type json, so its verdict cannot be read",
        ),
        ("eval-judge", 6, "judge chat/plain cannot judge: its output_schema does not require 'score'"),
        ("eval-judge", 6, "judge chat/plain cannot judge: its output_schema does not declare 'pass' as a boolean"),
        ("eval-judge", 6, "judge chat/plain cannot judge: its output_schema does not declare 'reason' as a string"),
        (
            "eval-judge",
            6,
            "judge chat/plain cannot judge: its templates read question, but a judge is given only inputs, answer, expectation",
        ),
    ]


def test_format_problems_are_findings_with_their_rule_and_place(tmp_path: Path) -> None:
    text = (
        "cases:\n"
        "  - id: one\n    inputs: {question: q}\n    expect: [{contain: x}, {regex: '(?<=a)b'}]\n"
        "  - {id: one, inputs: {question: q}}\n"
    )
    report = _lint(tmp_path, {"../evals/chat/minimal.yml": text})
    assert [(f.rule, f.line, f.column) for f in report.findings] == [
        ("eval-schema", 4, 15),
        ("eval-regex", 4, 36),
        ("eval-duplicate-id", 5, 10),
    ]
    text_report = as_text(report)
    assert (
        f"{EVALS}/chat/minimal.yml:4:15: error [eval-schema] unknown assertion 'contain'; did you mean 'contains'?"
        in text_report
    )
    assert "hint: the kinds are contains, not_contains, json_schema" in text_report


def test_yaml_problems_of_an_eval_file_are_reported_like_a_definitions(tmp_path: Path) -> None:
    text = "cases:\n  - {id: one, inputs: {question: q, question: r}}\n  - {id: [two\n"
    report = _lint(tmp_path, {"../evals/chat/minimal.yml": text})
    assert [(f.rule, f.line) for f in report.findings] == [("duplicate-key", 2), ("yaml-syntax", 4)]


def test_files_outside_the_layout_are_warned_about_and_underscore_folders_are_not_read(tmp_path: Path) -> None:
    report = _lint(
        tmp_path,
        {
            "../evals/minimal.yml": "cases: [{id: a}]\n",
            "../evals/chat/deeper/minimal.yml": "cases: [{id: a}]\n",
            "../evals/chat/minimal.yaml": "cases: [{id: a}]\n",
            "../evals/chat/Minimal.yml": "cases: [{id: a}]\n",
            "../evals/_replays/chat/minimal.yml": "not: an eval file\n",
            "../evals/chat/notes.md": "# notes\n",
        },
    )
    assert [(f.rule, f.severity, f.file) for f in report.findings] == [
        ("eval-layout", "warning", f"{EVALS}/chat/Minimal.yml"),
        ("eval-layout", "warning", f"{EVALS}/chat/deeper/minimal.yml"),
        ("eval-layout", "warning", f"{EVALS}/chat/minimal.yaml"),
        ("eval-layout", "warning", f"{EVALS}/minimal.yml"),
    ]
    assert report.evals == []


def test_a_dataset_broken_on_every_case_is_reported_within_a_bound(tmp_path: Path) -> None:
    cases = "".join(f"  - {{id: c{index}, inputs: {{questoin: q}}}}\n" for index in range(1_000))
    report = _lint(tmp_path, {"../evals/chat/minimal.yml": "cases:\n" + cases})
    assert len(report.findings) == MAX_FINDINGS + 1
    assert "and 1800 more problems in this file, left out" in [f.message for f in report.findings]
