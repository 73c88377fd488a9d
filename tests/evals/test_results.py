"""The results' own rules: a case's status from its runs, how a case changed
from base to head, the summaries worked out from them, and their JSON."""

from __future__ import annotations

import json

from registry.evals import (
    AssertionOutcome,
    CaseComparison,
    CaseResult,
    DatasetResult,
    DatasetSide,
    EvalRun,
    Gate,
    JudgeOutcome,
    ReleasePin,
    RunRecord,
    RunSettings,
    Status,
)


def run(status: Status, *, repeat: int = 1, score: float | None = None, tokens: int | None = None) -> RunRecord:
    judge = JudgeOutcome("evals/judge", "d" * 64, score=score, passed=score is not None and score >= 0.5)
    assertion = AssertionOutcome("judge", "judged by evals/judge", status, judge=judge if score is not None else None)
    return RunRecord(
        repeat=repeat,
        label=f"head:a/b:c#{repeat}",
        status=status,
        output="answer",
        outcome="completed",
        assertions=(assertion,),
        input_tokens=tokens,
        output_tokens=tokens,
        seconds=0.5,
        trace_id="t" * 32,
    )


def case(*statuses: Status, case_id: str = "c") -> CaseResult:
    return CaseResult(case_id, tuple(run(status, repeat=n) for n, status in enumerate(statuses, start=1)))


def test_a_failed_run_fails_the_case_even_beside_a_broken_one() -> None:
    assert case("passed", "failed", "error").status == "failed"
    assert case("passed", "error").status == "error"
    assert case("passed", "passed").status == "passed"


def test_a_case_that_could_not_be_run_is_an_error_never_a_pass() -> None:
    assert CaseResult("c", problem="inputs: unknown key").status == "error"
    assert CaseResult("c").status == "error"


def test_changes_compare_statuses_and_errors_make_cases_incomparable() -> None:
    assert CaseComparison("c", case("passed"), case("failed")).change == "regressed"
    assert CaseComparison("c", case("failed"), case("passed")).change == "fixed"
    assert CaseComparison("c", case("failed"), case("failed")).change == "unchanged"
    assert CaseComparison("c", case("passed"), case("error")).change == "error"
    assert CaseComparison("c", None, case("passed")).change == "added"
    assert CaseComparison("c", case("passed"), None).change == "removed"


def test_the_pass_rate_leaves_errors_out_and_the_summary_adds_tokens_and_scores() -> None:
    runs = (run("passed", score=1.0, tokens=3), run("failed", score=0.25), run("error"))
    dataset = DatasetResult(
        "a/b.yml",
        "a/b",
        base=None,
        head=DatasetSide("head", "a/b", "d" * 64, "ai_gateway/evals/a/b.yml"),
        cases=(CaseComparison("c", None, CaseResult("c", runs)),),
    )
    summary = dataset.summary("head")
    assert (summary.runs, summary.runs_passed, summary.runs_failed, summary.runs_errors) == (3, 1, 1, 1)
    assert summary.pass_rate == 0.5
    assert summary.judge_score_mean == 0.625
    assert (summary.input_tokens, summary.output_tokens) == (3, 3)
    assert dataset.summary("base").cases == 0 and dataset.summary("base").pass_rate is None


def test_an_eval_run_is_plain_json_with_both_pins_and_the_gate() -> None:
    head = ReleasePin("head", "worktree", "worktree", "c" * 64)
    base = ReleasePin("base", "@production", "v1.0.0", "a" * 40, channel="production")
    dataset = DatasetResult(
        "a/b.yml",
        "a/b",
        base=DatasetSide("base", "a/b", "1" * 64, "ai_gateway/evals/a/b.yml"),
        head=DatasetSide("head", "a/b", "2" * 64, "ai_gateway/evals/a/b.yml"),
        cases=(CaseComparison("c", case("passed"), case("failed")),),
    )
    result = EvalRun(
        head=head,
        base=base,
        settings=RunSettings(model="scripted", concurrency=8),
        datasets=(dataset,),
        gate=Gate("regression", 0.0, ("a/b: 1 case passed on base and fails on head: c",)),
    )
    written = json.loads(json.dumps(result.as_json()))
    assert written["base"]["channel"] == "production" and written["head"]["tag"] == "worktree"
    assert written["gate"] == {
        "fail_on": "regression",
        "tolerance": 0.0,
        "passed": False,
        "reasons": ["a/b: 1 case passed on base and fails on head: c"],
    }
    assert written["datasets"][0]["cases"][0]["change"] == "regressed"
    assert written["datasets"][0]["summary"]["base"]["pass_rate"] == 1.0
    assert written["datasets"][0]["cases"][0]["head"]["runs"][0]["trace_id"] == "t" * 32
