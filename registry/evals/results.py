"""What an evaluation found, as typed frozen values: what every report reads.

The runner (``registry.evals.runner``) gives one ``EvalRun``::

    EvalRun                    the whole evaluation
    ├─ base, head: ReleasePin  what each side was pinned to (tag, commit; base None with --head only)
    ├─ settings: RunSettings   repeat, concurrency, limit, the model, --changed
    ├─ datasets: DatasetResult one per eval file evaluated, in path order
    │  ├─ base, head: DatasetSide   the agent's digest, the eval file, the judges used, or why nothing ran
    │  └─ cases: CaseComparison     one per case id, in head's order then base's
    │     └─ base, head: CaseResult     that case on that side
    │        └─ runs: RunRecord             one per repeat: output, outcome, calls, tokens, latency, trace id
    │           └─ assertions: AssertionOutcome   passed, failed or error, with why; a judge's score and digest
    └─ gate: Gate              whether --fail-on tripped, and why

Statuses are ``passed``, ``failed`` and ``error`` (``registry.evals.Status``):
an ``error`` is a run that could not be judged (a model or judge outage, a
request missing from a replay file, a case that cannot be read), never
counted as a pass or a failure. A run passes when each of its assertions
does; a case on a side is ``failed`` when any run of it failed, else
``error`` when any broke, else ``passed``. Summaries (``SideSummary``) are
worked out from these values, never stored apart from them.

``as_json()`` on each gives plain JSON values (what ``--format json``
writes, every field included); nothing here reads files or runs anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from registry.evals.assertions import ERROR, FAILED, PASSED, Status

SideName = Literal["base", "head"]
Change = Literal["regressed", "fixed", "unchanged", "added", "removed", "error"]
"""How a case differs from base to head:

- ``regressed``: passed on base, failed on head;
- ``fixed``: failed on base, passed on head;
- ``unchanged``: the same status on both sides (passed, or failed);
- ``added`` / ``removed``: on one side only (a new case, or one taken out);
- ``error``: an error on either side, so that the two cannot be compared.

With one side (``--head`` only) every case is ``added``."""


@dataclass(frozen=True)
class ReleasePin:
    """What one side was resolved to, once, for the whole run."""

    side: SideName
    requested: str
    """The ref as given: a version, a range, ``@channel``, ``latest`` or ``worktree``."""
    tag: str
    """The release's tag; ``worktree`` for the working tree."""
    commit: str
    """The commit; for the working tree, a digest of its files (``registry.store.worktree``)."""
    channel: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "requested": self.requested,
            "tag": self.tag,
            "commit": self.commit,
            "channel": self.channel,
        }


@dataclass(frozen=True)
class JudgeOutcome:
    """What a judge assertion's judge said, and which judge it was."""

    agent: str
    digest: str | None
    """The judge agent's digest at the side's release; None when it could not be loaded."""
    score: float | None = None
    """From 0 to 1; None when the judge gave no usable verdict."""
    passed: bool | None = None
    """The judge's own ``pass``."""
    min_score: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "digest": self.digest,
            "score": self.score,
            "pass": self.passed,
            "min_score": self.min_score,
        }


@dataclass(frozen=True)
class AssertionOutcome:
    """One assertion's verdict on one run."""

    kind: str
    """As written in the file: ``contains``, ``judge``, ... (``registry.evals.ASSERTION_KINDS``)."""
    description: str
    """The assertion in words (``contains 'refund'``, ``judged by evals/helpfulness, at least 0.7``)."""
    status: Status
    reason: str = ""
    """One line: why it failed or could not be checked; a judge's reason."""
    judge: JudgeOutcome | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "description": self.description,
            "status": self.status,
            "reason": self.reason,
        }
        if self.judge is not None:
            out["judge"] = self.judge.as_json()
        return out


@dataclass(frozen=True)
class RunRecord:
    """One run of a case on one side (one of its repeats)."""

    repeat: int
    """Which run of the case this is, from 1."""
    label: str
    """``<side>:<agent>:<case id>#<repeat>``: what its model exchanges are
    recorded and replayed under (``--record``, ``--replay``)."""
    status: Status
    output: str | None
    outcome: str
    """``completed``, ``blocked``, ``exhausted`` or ``failed``."""
    stopped: str | None = None
    """Why the run did not complete, in one line."""
    error: str | None = None
    """Why the run could not be judged (a model outage...); set when ``status`` is ``error``."""
    assertions: tuple[AssertionOutcome, ...] = ()
    llm_calls: int = 0
    """Model calls of the agent's run (its judges' not included)."""
    tool_calls: tuple[str, ...] = ()
    """The tools it called, by name, in order."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    """Tokens the run's model calls used, when the model said (its judges' not included)."""
    seconds: float = 0.0
    """How long the agent's run took (its judges' not included)."""
    trace_id: str = ""
    """The id of the run's trace: its root span's ``registry.eval.trace_id``,
    and the name of its file in ``--trace-dir``."""

    def as_json(self) -> dict[str, Any]:
        return {
            "repeat": self.repeat,
            "label": self.label,
            "status": self.status,
            "output": self.output,
            "outcome": self.outcome,
            "stopped": self.stopped,
            "error": self.error,
            "assertions": [assertion.as_json() for assertion in self.assertions],
            "llm_calls": self.llm_calls,
            "tool_calls": list(self.tool_calls),
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
            "seconds": round(self.seconds, 6),
            "trace_id": self.trace_id,
        }


@dataclass(frozen=True)
class CaseResult:
    """One case on one side: each of its runs, or why it could not be run."""

    case_id: str
    runs: tuple[RunRecord, ...] = ()
    description: str | None = None
    tags: tuple[str, ...] = ()
    where: str = ""
    """``file:line:column`` of the case in the side's eval file."""
    problem: str | None = None
    """Why the case could not be run (it cannot be read): then it is ``error`` and has no runs."""

    @property
    def status(self) -> Status:
        """``failed`` when any run failed, else ``error`` when any broke (or it
        could not be run), else ``passed``."""
        statuses = {run.status for run in self.runs}
        if FAILED in statuses:
            return FAILED
        if self.problem is not None or ERROR in statuses or not self.runs:
            return ERROR
        return PASSED

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "status": self.status,
            "description": self.description,
            "tags": list(self.tags),
            "where": self.where,
            "problem": self.problem,
            "runs": [run.as_json() for run in self.runs],
        }


@dataclass(frozen=True)
class CaseComparison:
    """One case id, on each side where it is."""

    case_id: str
    base: CaseResult | None
    head: CaseResult | None

    @property
    def change(self) -> Change:
        if self.head is None:
            return "removed"
        if self.base is None:
            return "added"
        before, after = self.base.status, self.head.status
        if ERROR in (before, after):
            return "error"
        if before == after:
            return "unchanged"
        return "regressed" if after == FAILED else "fixed"

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "change": self.change,
            "base": self.base.as_json() if self.base is not None else None,
            "head": self.head.as_json() if self.head is not None else None,
        }


@dataclass(frozen=True)
class JudgePin:
    """A judge agent one side's cases were judged by."""

    agent: str
    digest: str | None
    """None when the agent is not a valid definition at that release."""

    def as_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "digest": self.digest}


@dataclass(frozen=True)
class SideSummary:
    """The numbers of one dataset on one side, worked out from its cases."""

    cases: int
    passed: int
    failed: int
    errors: int
    runs: int
    runs_passed: int
    runs_failed: int
    runs_errors: int
    input_tokens: int | None
    output_tokens: int | None
    seconds: float
    """The runs' time added up (not the wall-clock time: runs overlap)."""
    judge_scores: tuple[float, ...]
    """Every score a judge gave, in run order."""

    @property
    def pass_rate(self) -> float | None:
        """Runs passed among the runs that passed or failed (errors left out); None when none did."""
        judged = self.runs_passed + self.runs_failed
        return self.runs_passed / judged if judged else None

    @property
    def judge_score_mean(self) -> float | None:
        return sum(self.judge_scores) / len(self.judge_scores) if self.judge_scores else None

    @classmethod
    def of(cls, cases: Iterable[CaseResult]) -> SideSummary:
        counts = {PASSED: 0, FAILED: 0, ERROR: 0}
        run_counts = {PASSED: 0, FAILED: 0, ERROR: 0}
        tokens: list[int | None] = [None, None]
        seconds, scores = 0.0, list[float]()
        for case in cases:
            counts[case.status] += 1
            for run in case.runs:
                run_counts[run.status] += 1
                seconds += run.seconds
                for index, used in enumerate((run.input_tokens, run.output_tokens)):
                    if used is not None:
                        tokens[index] = (tokens[index] or 0) + used
                judges = (a.judge for a in run.assertions if a.judge is not None)
                scores.extend(judge.score for judge in judges if judge.score is not None)
        return cls(
            cases=sum(counts.values()),
            passed=counts[PASSED],
            failed=counts[FAILED],
            errors=counts[ERROR],
            runs=sum(run_counts.values()),
            runs_passed=run_counts[PASSED],
            runs_failed=run_counts[FAILED],
            runs_errors=run_counts[ERROR],
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            seconds=seconds,
            judge_scores=tuple(scores),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "runs": self.runs,
            "runs_passed": self.runs_passed,
            "runs_failed": self.runs_failed,
            "runs_errors": self.runs_errors,
            "pass_rate": self.pass_rate,
            "judge_score_mean": self.judge_score_mean,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
            "seconds": round(self.seconds, 6),
        }


@dataclass(frozen=True)
class DatasetSide:
    """One eval file's agent at one side: what was evaluated, or why nothing was."""

    side: SideName
    agent: str
    digest: str | None
    """The agent's digest at the side's release (a composite's covers every
    agent it can run); None when it is missing or invalid there."""
    eval_file: str | None
    """The eval file, relative to the repository; None when the side has none."""
    eval_file_id: str | None = None
    """The file's git blob id (for the working tree, the id git would give it)."""
    problem: str | None = None
    """Why none of its cases ran on this side (an invalid definition, an eval
    file that cannot be read): one line."""
    judges: tuple[JudgePin, ...] = ()
    """The judges its cases asked, by agent."""
    complete: bool = True
    """False when ``--limit`` left cases of the file unread."""

    def as_json(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "agent": self.agent,
            "digest": self.digest,
            "eval_file": self.eval_file,
            "eval_file_id": self.eval_file_id,
            "problem": self.problem,
            "judges": [judge.as_json() for judge in self.judges],
            "complete": self.complete,
        }


@dataclass(frozen=True)
class DatasetResult:
    """One eval file (``<usecase>/<name>.yml`` under the evals root), on each side."""

    dataset: str
    """The file's path under the evals root: ``support/triage.yml``."""
    agent: str
    """The agent evaluated (head's, when the sides differ)."""
    base: DatasetSide | None
    """None when only one side is evaluated."""
    head: DatasetSide
    cases: tuple[CaseComparison, ...]
    selected: tuple[str, ...] = ()
    """Why ``--changed`` picked it (``definition changed``, ``eval file changed``,
    ``new``); empty without ``--changed``."""

    def summary(self, side: SideName) -> SideSummary:
        """The numbers of one side (all zeros for a side that was not evaluated)."""
        return SideSummary.of(case for comparison in self.cases if (case := getattr(comparison, side)) is not None)

    def changes(self, *wanted: Change) -> tuple[CaseComparison, ...]:
        """The cases whose change is one of ``wanted``, in order."""
        return tuple(comparison for comparison in self.cases if comparison.change in wanted)

    def as_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "agent": self.agent,
            "selected": list(self.selected),
            "base": self.base.as_json() if self.base is not None else None,
            "head": self.head.as_json(),
            "summary": {
                "base": self.summary("base").as_json() if self.base is not None else None,
                "head": self.summary("head").as_json(),
            },
            "cases": [comparison.as_json() for comparison in self.cases],
        }


@dataclass(frozen=True)
class RunSettings:
    """How the evaluation was run."""

    model: str
    """The model, as the executor describes it (``--model``, ``--models``, a replay...)."""
    concurrency: int
    repeat: int | None = None
    """``--repeat``: every case's runs; None: as each eval file says."""
    limit: int | None = None
    """``--limit``: cases read per eval file and side; None: all."""
    changed: bool = False
    """Whether only the datasets that changed were evaluated (``--changed``)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "concurrency": self.concurrency,
            "repeat": self.repeat,
            "limit": self.limit,
            "changed": self.changed,
        }


FailOn = Literal["regression", "failure", "never"]


@dataclass(frozen=True)
class Gate:
    """What ``--fail-on`` made of the results: ``passed``, or why not (one line a reason)."""

    fail_on: FailOn
    tolerance: float
    reasons: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.reasons

    def as_json(self) -> dict[str, Any]:
        return {
            "fail_on": self.fail_on,
            "tolerance": self.tolerance,
            "passed": self.passed,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class EvalRun:
    """A whole evaluation: both sides pinned, every dataset, and the gate."""

    head: ReleasePin
    base: ReleasePin | None
    settings: RunSettings
    datasets: tuple[DatasetResult, ...]
    gate: Gate
    seconds: float = 0.0
    """Wall-clock time of the whole evaluation."""

    def as_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "base": self.base.as_json() if self.base is not None else None,
            "head": self.head.as_json(),
            "settings": self.settings.as_json(),
            "gate": self.gate.as_json(),
            "seconds": round(self.seconds, 6),
            "datasets": [dataset.as_json() for dataset in self.datasets],
        }
