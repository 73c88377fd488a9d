"""Evaluation results built directly, for the reports' tests: runs of any
size and shape (hostile outputs, outages, thousands of cases, one side)
without running a model."""

from __future__ import annotations

from collections.abc import Sequence

from registry.evals import (
    AssertionOutcome,
    CaseComparison,
    CaseResult,
    DatasetResult,
    DatasetSide,
    EvalRun,
    JudgeOutcome,
    JudgePin,
    ReleasePin,
    RunRecord,
    RunSettings,
    SideName,
    Status,
)
from registry.evals.gate import judge_gate

HOSTILE = (
    "| a | b |\n```\n<script>alert(1)</script> <img src=x onerror=alert(2)> ]]> \x00 \x1b[31mred\x1b[0m"
    " @alice #12 ![x](https://example.com/x.png) [link](javascript:alert(3)) **bold** </details> & &amp;"
    " www.example.com \u202etxt.exe `tick` ~~gone~~ $x$ \ud800"
)
"""An output that holds the metacharacters of Markdown, HTML and XML, control
characters, a lone surrogate, mentions and links."""

BASE_PIN = ReleasePin("base", "@production", "v1.0.0", "a" * 40, channel="production")
HEAD_PIN = ReleasePin("head", "worktree", "worktree", "b" * 64)
JUDGE = "evals/helpfulness"
JUDGE_DIGESTS = {"base": "sha256:" + "1" * 64, "head": "sha256:" + "2" * 64}


def record(
    side: SideName,
    case_id: str,
    status: Status,
    *,
    output: str | None = "answer",
    repeat: int = 1,
    score: float | None = None,
    error: str | None = None,
    agent: str = "support/triage",
) -> RunRecord:
    """One run: a ``contains`` assertion with the status, a judge's score when given."""
    reason = {"passed": "", "failed": "the output does not contain 'refund'", "error": "the run broke"}[status]
    assertions = [AssertionOutcome("contains", "contains 'refund'", status, reason)]
    if score is not None:
        judge = JudgeOutcome(JUDGE, JUDGE_DIGESTS[side], score=score, passed=score >= 0.5, min_score=0.5)
        assertions.append(AssertionOutcome("judge", f"judged by {JUDGE}, at least 0.5", "passed", "fine", judge))
    return RunRecord(
        repeat=repeat,
        label=f"{side}:{agent}:{case_id}#{repeat}",
        status=status,
        output=None if status == "error" else output,
        outcome="failed" if status == "error" else "completed",
        error=error if error is not None else ("the model call failed: 503 overloaded" if status == "error" else None),
        assertions=tuple(assertions),
        llm_calls=1,
        input_tokens=10,
        output_tokens=2,
        seconds=0.25,
        trace_id=f"{case_id}-{side}-{repeat}".ljust(32, "0")[:32],
    )


def case(
    side: SideName,
    case_id: str,
    *statuses: Status,
    output: str | None = "answer",
    scores: Sequence[float] = (),
    line: int = 3,
) -> CaseResult:
    """A case with one run per status (the judge's scores, when given, one a run)."""
    runs = tuple(
        record(side, case_id, status, output=output, repeat=n, score=scores[n - 1] if scores else None)
        for n, status in enumerate(statuses, start=1)
    )
    return CaseResult(case_id, runs, where=f"ai_gateway/evals/support/triage.yml:{line}:5")


def dataset(
    cases: Sequence[CaseComparison],
    *,
    agent: str = "support/triage",
    two: bool = True,
    judged: bool = False,
    head_problem: str | None = None,
) -> DatasetResult:
    judges = {side: (JudgePin(JUDGE, digest),) if judged else () for side, digest in JUDGE_DIGESTS.items()}
    eval_file = f"ai_gateway/evals/{agent}.yml"
    base = DatasetSide("base", agent, "sha256:" + "3" * 64, eval_file, "c" * 40, judges=judges["base"])
    head = DatasetSide(
        "head", agent, None if head_problem else "sha256:" + "4" * 64, eval_file, "d" * 40,
        problem=head_problem, judges=judges["head"],
    )  # fmt: skip
    return DatasetResult(f"{agent}.yml", agent, base if two else None, head, tuple(cases))


def evaluation(datasets: Sequence[DatasetResult], *, two: bool = True, repeat: int | None = None) -> EvalRun:
    """The run of ``datasets``, gated on regressions."""
    return EvalRun(
        head=HEAD_PIN,
        base=BASE_PIN if two else None,
        settings=RunSettings(model="scripted replies.yml", concurrency=8, repeat=repeat),
        datasets=tuple(datasets),
        gate=judge_gate(datasets, "regression"),
        seconds=1.5,
    )


def flips() -> EvalRun:
    """Two sides: a failure listed before a regression in the file, a fix, an
    outage on head, an unchanged pass, a new and a removed case."""
    cases = [
        CaseComparison("still-bad", case("base", "still-bad", "failed"), case("head", "still-bad", "failed", line=1)),
        CaseComparison("refund", case("base", "refund", "passed", output="billing"), case("head", "refund", "failed", output="general", line=5)),
        CaseComparison("login", case("base", "login", "failed", output="no"), case("head", "login", "passed", output="account", line=7)),
        CaseComparison("outage", case("base", "outage", "passed"), case("head", "outage", "error", line=9)),
        CaseComparison("fine", case("base", "fine", "passed"), case("head", "fine", "passed", line=11)),
        CaseComparison("new", None, case("head", "new", "passed", line=13)),
        CaseComparison("gone", case("base", "gone", "passed"), None),
    ]  # fmt: skip
    return evaluation([dataset(cases)])


def many(count: int, *, output: str = "answer " * 40) -> EvalRun:
    """Two sides, ``count`` cases each regressed, fixed, failed or errored in turn."""
    kinds: list[tuple[Status, Status]] = [
        ("passed", "failed"),
        ("failed", "passed"),
        ("failed", "failed"),
        ("passed", "error"),
    ]
    cases = []
    for n in range(count):
        before, after = kinds[n % len(kinds)]
        case_id = f"case-{n}"
        cases.append(
            CaseComparison(case_id, case("base", case_id, before, output=output), case("head", case_id, after, output="more " + output))
        )  # fmt: skip
    return evaluation([dataset(cases)])
