"""Each assertion checked against what one run did: passed, failed with a
one-line reason, or error when the run broke; the record of a real run read
from the executor's result; and regular expressions that would backtrack
exponentially matched in linear time."""

from __future__ import annotations

import io

import pytest

from registry.evals import (
    Assertion,
    AssertionResult,
    CaseRun,
    Contains,
    Judge,
    LocalAssertion,
    Regex,
    ToolCallMade,
    check,
)
from registry.evals.reading import EvalFile
from registry.executor import PythonTools
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for, json_leaf

TOOLS = """\
name: Order helper
type: tool_calling
max_iterations: 3
model: {name: test-model}
tools:
  - name: lookup_order
    description: Looks an order up.
    parameters: {type: object, required: [order_id], properties: {order_id: {type: string}, full: {type: boolean}}}
prompt_templates:
  user: "{{ ticket }}"
inputs: {type: object, required: [ticket], properties: {ticket: {type: string}}}
"""
LABEL_SCHEMA = "{type: object, required: [label], properties: {label: {type: string}}}"


def _assertions(expect: str) -> tuple[Assertion, ...]:
    """The assertions of an ``expect:`` list written in YAML flow style."""
    text = f"cases:\n  - id: one\n    expect: {expect}\n"
    [case] = list(EvalFile(io.BytesIO(text.encode()), source="x.yml", agent="a/b").cases())
    return case.expect


def _local(expect: str) -> list[LocalAssertion]:
    """The assertions of ``expect`` checked without a judge."""
    return [assertion for assertion in _assertions(expect) if not isinstance(assertion, Judge)]


def _one(expect: str) -> LocalAssertion:
    [assertion] = _assertions(f"[{expect}]")
    assert not isinstance(assertion, Judge)
    return assertion


def _verdict(expect: str, run: CaseRun) -> tuple[str, str]:
    result = check(_one(expect), run)
    return result.status, result.reason


ANSWER = CaseRun(
    output='{"label": "billing", "items": [{"sku": "A-1", "qty": 2}], "refund": true}',
    data={"label": "billing", "items": [{"sku": "A-1", "qty": 2}], "refund": True},
    llm_calls=2,
    tool_calls=(
        ToolCallMade("lookup_order", {"order_id": "A-1", "full": True, "options": {"currency": "EUR", "x": 1}}),
    ),
)


@pytest.mark.parametrize(
    "expect",
    [
        "contains: billing",
        "not_contains: I cannot",
        "json_schema: {type: object, required: [label, items]}",
        "equals: {path: label, value: billing}",
        "equals: {path: items.0.qty, value: 2.0}",
        "equals: {path: refund, value: true}",
        'regex: \'"label": "(billing|general)"\'',
        "tool_called: lookup_order",
        "tool_called: {name: lookup_order, args: {order_id: A-1}}",
        "tool_called: {name: lookup_order, args: {options: {currency: EUR}}}",
        "outcome: completed",
        "max_llm_calls: 2",
    ],
)
def test_each_assertion_passes_on_a_run_that_does_what_it_says(expect: str) -> None:
    assert _verdict(expect, ANSWER) == ("passed", "")


@pytest.mark.parametrize(
    ("expect", "reason"),
    [
        ("contains: refund please", "the output does not contain 'refund please'"),
        (
            "not_contains: billing",
            'the output contains \'billing\': \'{"label": "billing", "items": [{"sku": "A-1", "q\'',
        ),
        (
            "json_schema: {type: object, required: [reason], properties: {label: {enum: [tech]}}}",
            "the output does not fit the schema: /label: 'billing' is not one of ['tech'];"
            " /reason: missing required property 'reason'",
        ),
        ("equals: {path: label, value: tech}", 'label is "billing", not "tech"'),
        ("equals: {path: refund, value: 1}", "refund is true, not 1"),
        ("equals: {path: items.3.qty, value: 2}", "the output has no '3' at 'items.3.qty'"),
        ("equals: {path: reason, value: x}", "the output has no 'reason'"),
        (
            "regex: '^general$'",
            'the output does not match /^general$/: \'{"label": "billing", "items": [{"sku": "A-1", "qty": 2}], "refund": true}\'',
        ),
        ("tool_called: cancel_order", "cancel_order was not called (tools called: lookup_order)"),
        (
            "tool_called: {name: lookup_order, args: {order_id: A-2}}",
            'lookup_order was called 1 time, never with {"order_id": "A-2"}'
            ' (first with {"order_id": "A-1", "full": true, "options": {"currency": "EUR", "x": 1}})',
        ),
        (
            "tool_called: {name: lookup_order, args: {full: 1}}",
            'lookup_order was called 1 time, never with {"full": 1} (first with {"order_id": "A-1", "full": true, "options": {"currency": "EUR", "x": 1}})',
        ),
        ("outcome: blocked", "the run ended completed, not blocked"),
        ("max_llm_calls: 1", "the run made 2 model calls, more than 1"),
    ],
)
def test_each_assertion_fails_with_a_one_line_reason(expect: str, reason: str) -> None:
    assert _verdict(expect, ANSWER) == ("failed", reason)
    assert "\n" not in reason


def test_the_parsed_output_is_the_agents_data_or_else_the_output_read_as_json() -> None:
    as_text = CaseRun(output='{"label": "billing"}')
    assert _verdict("equals: {path: label, value: billing}", as_text) == ("passed", "")
    assert _verdict("equals: {value: {label: billing}}", as_text) == ("passed", "")
    prose = CaseRun(output="It is billing.")
    assert _verdict("equals: {path: label, value: billing}", prose) == (
        "failed",
        "the output is not JSON: 'It is billing.'",
    )


def test_a_run_without_output_fails_what_reads_the_output_and_says_why() -> None:
    stopped = CaseRun(output=None, outcome="failed", stopped="tool 'lookup_order' raised: no such order")
    reason = "the run gave no output (it ended failed: tool 'lookup_order' raised: no such order)"
    for expect in ("contains: x", "not_contains: x", "regex: x", "json_schema: {}", "equals: {value: 1}"):
        assert _verdict(expect, stopped) == ("failed", reason)
    assert _verdict("outcome: completed", stopped) == (
        "failed",
        "the run ended failed (tool 'lookup_order' raised: no such order), not completed",
    )
    assert _verdict("outcome: failed", stopped) == ("passed", "")


def test_a_run_that_broke_makes_every_assertion_an_error_never_a_pass_or_a_failure() -> None:
    broke = CaseRun(output=None, outcome="failed", error="the model answered 503 three times")
    for assertion in _local("[{contains: x}, {not_contains: x}, {outcome: failed}, {max_llm_calls: 5}]"):
        result = check(assertion, broke)
        assert (result.status, result.reason) == ("error", "the run broke: the model answered 503 three times")
        assert not result.passed


@pytest.mark.parametrize(
    ("pattern", "hostile", "matching"),
    [
        ("(a+)+$", "a" * 50_000 + "!", "aaa"),
        ("(a|aa)+$", "a" * 50_000 + "!", "aaa"),
        ("(x+x+)+y", "x" * 50_000, "xxy"),
        ("^(([a-z])+.)+[A-Z]([a-z])+$", "abcdefghijklmnopqrstuvwxyz" * 2_000 + "!", "ab Cd"),
    ],
)
def test_a_pattern_that_would_backtrack_exponentially_is_matched_in_linear_time(
    pattern: str, hostile: str, matching: str
) -> None:
    # A backtracking engine would run on each hostile text for longer than
    # the universe has existed; RE2 answers at once, so the test ends at all.
    regex = _one(f"regex: '{pattern}'")
    assert isinstance(regex, Regex) and type(regex.compiled).__module__.startswith("re2")
    assert _verdict(f"regex: '{pattern}'", CaseRun(output=hostile))[0] == "failed"
    assert _verdict(f"regex: '{pattern}'", CaseRun(output=matching)) == ("passed", "")


def test_json_equality_tells_true_from_one() -> None:
    assert _verdict("equals: {path: n, value: 1}", CaseRun(output="{}", data={"n": True}))[0] == "failed"
    assert _verdict("equals: {path: n, value: true}", CaseRun(output="{}", data={"n": 1}))[0] == "failed"
    assert (
        _verdict("equals: {path: n, value: [1, {a: null}]}", CaseRun(output="{}", data={"n": [1.0, {"a": None}]}))[0]
        == "passed"
    )


def test_the_record_of_a_real_run_has_its_output_calls_and_tool_calls(repo: LibraryRepo) -> None:
    repo.release(
        "v1.0.0",
        {"support/orders.yml": TOOLS, "support/label.yml": json_leaf("l", "{{ q }}", LABEL_SCHEMA, q="string")},
    )
    replies = [
        {"agent": "support/orders", "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}]},
        {"agent": "support/orders", "content": "Your order A-1 was refunded."},
        {"agent": "support/label", "content": '{"label": "billing"}'},
    ]
    tools = PythonTools({"lookup_order": lambda order_id, full=False: f"{order_id}: charged twice"})
    with executor_for(repo.path, replies, tools=[tools]) as executor:
        orders = CaseRun.of(executor.run("support/orders", {"ticket": "I was charged twice"}))
        label = CaseRun.of(executor.run("support/label", {"q": "x"}))
    assert orders == CaseRun(
        output="Your order A-1 was refunded.",
        outcome="completed",
        llm_calls=2,
        tool_calls=(ToolCallMade("lookup_order", {"order_id": "A-1"}),),
    )
    assert label.data == {"label": "billing"} and label.parsed == {"label": "billing"}
    expect = _local(
        "[{tool_called: {name: lookup_order, args: {order_id: A-1}}}, {contains: refunded}, {max_llm_calls: 2}]"
    )
    assert [check(assertion, orders).status for assertion in expect] == ["passed"] * 3


def test_a_result_names_its_assertion() -> None:
    result = check(Contains("refund"), CaseRun(output="a refund"))
    assert result == AssertionResult(Contains("refund"), "passed")
    assert result.assertion.describe() == "contains 'refund'"
