"""Reading eval files: typed cases with their defaults, every problem at its
file:line:column with a "did you mean", and where eval files are."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from registry.errors import ConfigurationError
from registry.evals import (
    Contains,
    Equals,
    EvalCase,
    InvalidCase,
    JsonSchema,
    Judge,
    MaxLlmCalls,
    NotContains,
    OutcomeIs,
    Regex,
    ToolCalled,
    Turn,
    agent_of_path,
    eval_path,
    evals_root,
    open_eval_file,
)
from registry.evals.reading import EvalFile
from registry.format.safeyaml import Position
from registry.models import Issue

ISSUE_EXAMPLE = """\
agent: support/triage            # optional when the path says it
defaults: {repeat: 1}
cases:
  - id: refund-simple
    inputs: {ticket: "I was charged twice"}
    history: []                  # optional prior turns
    expect:
      - contains: "refund"
      - not_contains: "I cannot"
      - json_schema: {type: object, required: [label]}      # on the parsed output
      - equals: {path: label, value: billing}
      - regex: "^(billing|general)$"                        # RE2
      - tool_called: {name: lookup_order, args: {order_id: "A-1"}}   # subset match
      - outcome: completed
      - max_llm_calls: 3
      - judge: {agent: evals/helpfulness, min_score: 0.7}    # an agent of the same release
"""


def _open(text: str, *, agent: str | None = "support/triage") -> EvalFile:
    return EvalFile(io.BytesIO(text.encode()), source="ai_gateway/evals/support/triage.yml", agent=agent)


def _problems(text: str) -> list[Issue]:
    """Every problem of the file, in file order."""
    eval_file = _open(text)
    issues = list(eval_file.header.issues)
    for entry in eval_file.entries():
        if isinstance(entry, InvalidCase):
            issues.extend(entry.issues)
    return issues + eval_file.problems


def test_the_issues_example_reads_into_typed_assertions() -> None:
    eval_file = _open(ISSUE_EXAMPLE, agent=None)
    assert eval_file.header.agent == "support/triage" and eval_file.header.issues == ()
    [case] = list(eval_file.cases())
    assert (case.id, case.index, case.repeat, case.history) == ("refund-simple", 0, 1, ())
    assert case.inputs == {"ticket": "I was charged twice"}
    assert case.where == "ai_gateway/evals/support/triage.yml:4:5"
    kinds = [type(assertion) for assertion in case.expect]
    assert kinds == [Contains, NotContains, JsonSchema, Equals, Regex, ToolCalled, OutcomeIs, MaxLlmCalls, Judge]
    assert case.expect[3] == Equals("label", "billing")
    assert case.expect[5] == ToolCalled("lookup_order", {"order_id": "A-1"})
    assert case.judges == (Judge("evals/helpfulness", 0.7, ""),)
    assert case.position(("inputs", "ticket")) == Position(5, 22)


def test_defaults_come_first_and_a_case_may_set_its_own_repeat() -> None:
    text = (
        "defaults: {repeat: 3, expect: [{outcome: completed}]}\n"
        "cases:\n"
        "  - {id: a, expect: [{contains: x}], tags: [smoke], description: First.}\n"
        "  - id: b\n    repeat: 5\n    history: [{role: user, content: hi}, {role: assistant, content: hello}]\n"
    )
    first, second = list(_open(text).cases())
    assert first.expect == (OutcomeIs("completed"), Contains("x")) and first.repeat == 3
    assert (first.tags, first.description, first.inputs) == (("smoke",), "First.", {})
    assert second.expect == (OutcomeIs("completed"),) and second.repeat == 5
    assert second.history == (Turn("user", "hi"), Turn("assistant", "hello"))
    assert second.history[0].as_dict() == {"role": "user", "content": "hi"}


def test_an_unknown_assertion_kind_is_an_error_at_its_line_with_did_you_mean() -> None:
    [problem] = _problems("cases:\n  - id: one\n    expect:\n      - contain: refund\n")
    assert problem.message == "unknown assertion 'contain'; did you mean 'contains'?"
    assert (problem.file, problem.line, problem.column) == ("ai_gateway/evals/support/triage.yml", 4, 9)
    assert problem.rule == "eval-schema" and problem.path == "/cases/0/expect/0/contain"
    assert problem.hint is not None and "the kinds are contains, not_contains" in problem.hint


def test_unknown_keys_come_with_did_you_mean_wherever_they_are() -> None:
    text = (
        "agnet: support/triage\n"
        "defaults: {reapet: 2}\n"
        "cases:\n"
        "  - id: one\n    input: {q: x}\n"
        "    expect: [{equals: {pth: a, value: 1}}, {judge: {agent: evals/h, min_scor: 1}}]\n"
    )
    messages = [(problem.line, problem.message) for problem in _problems(text)]
    assert messages == [
        (1, "unknown key 'agnet' in an eval file; did you mean 'agent'?"),
        (2, "unknown key 'reapet' in defaults; did you mean 'repeat'?"),
        (5, "unknown key 'input' in a case; did you mean 'inputs'?"),
        (6, "unknown key 'pth' in equals; did you mean 'path'?"),
        (6, "unknown key 'min_scor' in judge; did you mean 'min_score'?"),
    ]


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = (
        "cases:\n"
        "  - id: one\n    inputs: [q]\n    expect: [{outcome: complete}, {max_llm_calls: 0}]\n"
        "  - {id: two, repeat: 0}\n"
        "  - {id: 'bad id'}\n"
        "  - {id: three, history: [{role: system, content: x}], tags: [ok, 'not ok']}\n"
    )
    problems = _problems(text)
    assert [problem.line for problem in problems] == [3, 4, 4, 5, 6, 7, 7]
    assert "did you mean 'completed'?" in problems[1].message


def test_a_duplicate_case_id_names_the_line_of_the_first() -> None:
    [problem] = _problems("cases:\n  - {id: one}\n  - {id: two}\n  - {id: one}\n")
    assert problem.message == "case id 'one' is used again (first on line 2)"
    assert (problem.line, problem.rule) == (4, "eval-duplicate-id")


def test_a_pattern_re2_refuses_is_an_eval_regex_error() -> None:
    [problem] = _problems("cases:\n  - id: one\n    expect: [{regex: '(a)\\1'}, {regex: '(?=a)b'}]\n")[:1]
    assert problem.rule == "eval-regex" and problem.line == 3
    assert "not a regular expression RE2 can run" in problem.message
    assert len(_problems("cases:\n  - id: one\n    expect: [{regex: '(a)\\1'}, {regex: '(?=a)b'}]\n")) == 2


def test_a_json_schema_that_is_not_one_is_an_error_at_its_keyword() -> None:
    [problem] = _problems("cases:\n  - id: one\n    expect:\n      - json_schema: {type: strng}\n")
    assert problem.message.startswith("json_schema is not a valid JSON Schema")
    assert problem.line == 4


def test_the_agent_comes_from_the_file_or_its_path() -> None:
    assert _open("cases: [{id: a}]\n").header.agent == "support/triage"
    assert _open("agent: other/agent\ncases: [{id: a}]\n").header.agent == "other/agent"
    header = _open("cases: [{id: a}]\n", agent=None).header
    assert header.agent is None
    assert header.issues[0].message == "this file does not say which agent it evaluates, and its path does not name one"


def test_the_header_goes_before_the_cases() -> None:
    eval_file = _open("cases: [{id: a}]\ndefaults: {repeat: 2}\nextra: 1\n")
    assert [case.id for case in eval_file.entries()] == ["a"]
    assert [(problem.line, problem.message) for problem in eval_file.problems] == [
        (2, "defaults comes after cases; write it before them, since cases are read one at a time after the header"),
        (3, "unknown key 'extra' in an eval file"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agent: support/triage\n", "an eval file needs cases: a list of cases"),
        ("cases: []\n", "cases is empty; give it at least one case"),
        ("cases: {a: 1}\n", "cases is a list of cases, not a mapping"),
        ("- a list\n", "the file is not a mapping of keys"),
        ("", "file is empty; it is a YAML mapping of keys"),
    ],
)
def test_a_file_without_cases_says_so(text: str, message: str) -> None:
    assert [problem.message for problem in _problems(text)] == [message]


def test_cases_raises_at_the_first_problem_naming_where_it_is() -> None:
    eval_file = _open("cases:\n  - {id: one}\n  - {id: two, expect: [{contain: x}]}\n  - {id: three}\n")
    read: list[EvalCase] = []
    with pytest.raises(ConfigurationError) as info:
        for case in eval_file.cases():
            read.append(case)
    assert [case.id for case in read] == ["one"]
    assert str(info.value) == (
        "ai_gateway/evals/support/triage.yml:3:25: unknown assertion 'contain'; did you mean 'contains'?"
    )
    assert info.value.errors[0].rule == "eval-schema"


def test_a_syntax_error_after_good_cases_is_raised_once_they_are_read() -> None:
    eval_file = _open("cases:\n  - {id: one}\n  - {id: [two\n")
    cases = eval_file.cases()
    assert next(cases).id == "one"
    with pytest.raises(ConfigurationError) as info:
        next(cases)
    assert "YAML syntax error" in str(info.value)


def test_cases_are_read_once() -> None:
    eval_file = _open("cases: [{id: a}]\n")
    assert [case.id for case in eval_file.cases()] == ["a"]
    with pytest.raises(RuntimeError):
        list(eval_file.cases())


def test_open_eval_file_reads_a_file_and_says_when_there_is_none(tmp_path: Path) -> None:
    path = tmp_path / "triage.yml"
    path.write_text("cases: [{id: a}]\n", encoding="utf-8")
    with open_eval_file(path, agent="support/triage") as eval_file:
        assert [case.where for case in eval_file.cases()] == [f"{path}:1:9"]
    with pytest.raises(ConfigurationError, match="eval file .*nope.yml does not exist"):
        with open_eval_file(tmp_path / "nope.yml"):
            pass


def test_eval_files_live_beside_the_agents_root_one_per_agent() -> None:
    assert evals_root("ai_gateway/agents") == "ai_gateway/evals"
    assert evals_root("agents") == "evals"
    assert evals_root("prompts/ai_gateway/agents/") == "prompts/ai_gateway/evals"
    assert agent_of_path("support/triage.yml") == "support/triage"
    assert agent_of_path("triage.yml") is None
    assert agent_of_path("support/more/triage.yml") is None
    assert agent_of_path("support/triage.yaml") is None
    assert eval_path("support/triage") == "support/triage.yml"


def test_the_outcomes_are_the_executors() -> None:
    from registry.evals import OUTCOMES
    from registry.executor import OUTCOMES as EXECUTOR_OUTCOMES

    assert OUTCOMES == EXECUTOR_OUTCOMES
