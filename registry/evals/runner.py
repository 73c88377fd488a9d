"""The eval runner: every case of the planned eval files, on each side,
through the executor, with at most ``concurrency`` cases in flight.

One loop reads the cases, a file at a time and a case at a time
(``EvalFile.entries``: a dataset of 100,000 cases is never held whole), and
starts a task per run of a case once one of ``concurrency`` slots is free:
so no more cases are read than can run, and a run's judges run in its slot.
Each run is pinned: its agent, and each judge, come from its side's one
commit (``registry.evals.sides``).

A run that broke for a reason that is not the agent's (a model call failed:
an outage, a request missing from a replay file) is ``error``, with every
assertion; so is a judge assertion whose judge broke or answered no usable
verdict. Neither is ever counted as a pass or a failure.

Each run has a label, ``<side>:<agent>:<case id>#<repeat>``, set as the
``exchange_label`` of its task: what its model calls (and its judges') are
recorded, replayed and cached under.

Each run's trace gets an id (``registry.eval.trace_id`` on its root span),
written with the run's result, and the trace itself to ``trace_dir/<id>.json``
when one is given.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry.client import Agent
from registry.errors import ConfigurationError, summarize
from registry.evals.assertions import ERROR, FAILED, PASSED, AssertionResult, CaseRun, Status, check
from registry.evals.dataset import Assertion, EvalCase, InvalidCase, Judge, OutcomeIs
from registry.evals.gate import judge_gate
from registry.evals.judge import before_judging, judge_problems, judge_request, judged
from registry.evals.plan import Planned
from registry.evals.reading import EvalLimits
from registry.evals.results import (
    AssertionOutcome,
    CaseComparison,
    CaseResult,
    DatasetResult,
    DatasetSide,
    EvalRun,
    FailOn,
    JudgeOutcome,
    JudgePin,
    RunRecord,
    RunSettings,
)
from registry.evals.sides import Side
from registry.executor import Executor, RunResult
from registry.executor.runtime import NotBound
from registry.models import shorten
from registry.providers.recording import exchange_label

DEFAULT_CONCURRENCY = 8
_IMPLICIT: tuple[Assertion, ...] = (OutcomeIs("completed"),)
"""What a case with no assertions is held to: that its run completes."""


@dataclass(frozen=True)
class RunOptions:
    """How the runner runs the cases."""

    concurrency: int = DEFAULT_CONCURRENCY
    repeat: int | None = None
    """Runs of every case; None: as its eval file says."""
    limit: int | None = None
    """Cases read per eval file and side; None: every one."""
    fail_on: FailOn = "regression"
    tolerance: float = 0.0
    trace_dir: Path | None = None
    limits: EvalLimits = EvalLimits()


@dataclass
class _Slot:
    """One case on one side, as its runs come back."""

    case_id: str
    runs: list[RunRecord | None]
    description: str | None = None
    tags: tuple[str, ...] = ()
    where: str = ""
    problem: str | None = None

    def result(self) -> CaseResult:
        runs = tuple(run for run in self.runs if run is not None)
        return CaseResult(self.case_id, runs, self.description, self.tags, self.where, self.problem)


@dataclass
class _SideRun:
    """One eval file on one side, as the runner fills it."""

    side: Side
    planned: Planned
    slots: dict[str, _Slot] = field(default_factory=dict)
    problem: str | None = None
    complete: bool = True
    judges: dict[str, str | None] = field(default_factory=dict)

    def result(self) -> DatasetSide:
        relative = self.planned.dataset
        files = self.side.files()
        return DatasetSide(
            side=self.side.name,
            agent=self.planned.agent,
            digest=self.side.digest(self.planned.agent),
            eval_file=self.side.eval_file(relative) if relative in files else None,
            eval_file_id=files.get(relative),
            problem=self.problem,
            judges=tuple(JudgePin(agent, digest) for agent, digest in sorted(self.judges.items())),
            complete=self.complete,
        )


class EvalRunner:
    """Runs planned eval files on one or two sides through ``executor``."""

    def __init__(self, executor: Executor, options: RunOptions = RunOptions()) -> None:
        if options.concurrency < 1:
            raise ConfigurationError("--concurrency must be 1 or more")
        self.executor = executor
        self.options = options
        self._slots = asyncio.Semaphore(options.concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._fatal: BaseException | None = None
        self._judge_problems: dict[tuple[str, str], str | None] = {}

    async def run(self, head: Side, base: Side | None, planned: Sequence[Planned], *, changed: bool = False) -> EvalRun:
        """Every planned eval file on ``base`` (when given) and ``head``: the whole result, gate included."""
        started = time.monotonic()
        filled: list[tuple[Planned, _SideRun | None, _SideRun]] = []
        for item in planned:
            after = await self._side(head, item)
            before = None
            if base is not None:
                # An eval file of which nothing could run on head (its agent is
                # invalid there) is not run on base either: nothing to compare.
                nothing = after.problem is not None and not after.slots
                before = _SideRun(base, item) if nothing else await self._side(base, item)
            filled.append((item, before, after))
        await self._drain()
        datasets = tuple(_dataset(item, before, after) for item, before, after in filled)
        options = self.options
        settings = RunSettings(
            model=self.executor.model.description,
            concurrency=options.concurrency,
            repeat=options.repeat,
            limit=options.limit,
            changed=changed,
        )
        return EvalRun(
            head=head.pin,
            base=base.pin if base is not None else None,
            settings=settings,
            datasets=datasets,
            gate=judge_gate(datasets, options.fail_on, options.tolerance),
            seconds=time.monotonic() - started,
        )

    # --- reading cases and starting runs ----------------------------------------------------------

    async def _side(self, side: Side, planned: Planned) -> _SideRun:
        """Start every run of ``planned``'s cases on ``side`` (as slots free up)."""
        filling = _SideRun(side, planned)
        if planned.dataset not in side.files():
            return filling  # nothing to run: a dataset new on head has no base
        agent = side.agent(planned.agent)
        if isinstance(agent, str):
            filling.problem = agent
            return filling
        limit = self.options.limit
        with side.open_dataset(planned.dataset, limits=self.options.limits) as dataset:
            if dataset.header.issues:
                filling.problem = f"its eval file cannot be used: {summarize(dataset.header.issues)}"
                return filling
            if dataset.header.agent not in (None, planned.agent):
                filling.problem = f"its eval file evaluates {dataset.header.agent} {side.where}, not {planned.agent}"
                return filling
            # One case more than the limit is read, to tell whether the file had more.
            for count, entry in enumerate(dataset.entries(limit=None if limit is None else limit + 1)):
                if limit is not None and count == limit:
                    filling.complete = False
                    break
                await self._start_case(filling, agent, entry)
            if dataset.problems:
                filling.problem = f"its eval file cannot be read to the end: {summarize(dataset.problems)}"
        return filling

    async def _start_case(self, filling: _SideRun, agent: Agent, entry: EvalCase | InvalidCase) -> None:
        key = entry.id if entry.id is not None and entry.id not in filling.slots else f"#{entry.index + 1}"
        if isinstance(entry, InvalidCase):
            filling.slots[key] = _Slot(key, [], where=entry.where, problem=summarize(entry.issues))
            return
        repeat = self.options.repeat or entry.repeat
        slot = _Slot(key, [None] * repeat, entry.description, entry.tags, entry.where)
        filling.slots[key] = slot
        for number in range(1, repeat + 1):
            label = f"{filling.side.name}:{filling.planned.agent}:{entry.id}#{number}"
            await self._start(self._run_case(filling, agent, entry, slot, number, label))

    async def _start(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task of its own once a slot is free; stop at the
        first run that raised (a binding that cannot be made stops them all)."""
        try:
            await self._slots.acquire()
        except BaseException:
            work.close()  # never started: closed, rather than left to be warned about
            raise
        if self._fatal is not None:
            self._slots.release()
            work.close()
            raise self._fatal
        task = asyncio.ensure_future(self._in_slot(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _in_slot(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception as exc:  # a binding that cannot be made: no run can go on
            if self._fatal is None:
                self._fatal = exc
        finally:
            self._slots.release()

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))
        if self._fatal is not None:
            raise self._fatal

    # --- one run ----------------------------------------------------------------------------------

    async def _run_case(
        self, filling: _SideRun, agent: Agent, case: EvalCase, slot: _Slot, number: int, label: str
    ) -> None:
        # Set in this run's own task: its model calls, and its judges', are
        # recorded and replayed under it (--record, --replay, --cache).
        exchange_label.set(label)
        history = [turn.as_dict() for turn in case.history]
        result = await self.executor.arun(agent, case.inputs, history=history)
        run = CaseRun.of(result, error=broke(result))
        verdicts = [await self._assert(filling, case, run, assertion) for assertion in case.expect or _IMPLICIT]
        trace_id = self._keep_trace(result, label)
        slot.runs[number - 1] = RunRecord(
            repeat=number,
            label=label,
            status=_status(run, verdicts),
            output=result.output,
            outcome=result.outcome,
            stopped=result.error,
            error=run.error,
            assertions=tuple(verdicts),
            llm_calls=result.llm_calls,
            tool_calls=tuple(call.name for call in run.tool_calls),
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            seconds=result.seconds,
            trace_id=trace_id,
        )

    async def _assert(self, filling: _SideRun, case: EvalCase, run: CaseRun, assertion: Assertion) -> AssertionOutcome:
        if isinstance(assertion, Judge):
            return await self._judge(filling, case, run, assertion)
        return _outcome(check(assertion, run))

    async def _judge(self, filling: _SideRun, case: EvalCase, run: CaseRun, judge: Judge) -> AssertionOutcome:
        side = filling.side
        agent = side.agent(judge.agent)
        digest = agent.digest if isinstance(agent, Agent) else None
        filling.judges[judge.agent] = digest
        settled = before_judging(judge, run)
        if settled is not None:
            return _outcome(settled, digest=digest)
        unusable = agent if isinstance(agent, str) else self._cannot_judge(side, agent)
        if unusable is not None:
            return _outcome(AssertionResult(judge, ERROR, f"the judge cannot run: {unusable}"), digest=digest)
        request = judge_request(judge, case, run)
        reply = await self.executor.arun(agent, request.inputs)
        return _outcome(judged(judge, CaseRun.of(reply, error=broke(reply)), digest=reply.digest), digest=digest)

    def _cannot_judge(self, side: Side, agent: Agent) -> str | None:
        """Why ``agent`` cannot judge (lint's own check), once per side and agent."""
        key = (side.name, f"{agent.usecase}/{agent.name}")
        if key not in self._judge_problems:
            problems = judge_problems(agent.definition, agent.compiled.variables)
            self._judge_problems[key] = f"{key[1]} {problems[0]}" if problems else None
        return self._judge_problems[key]

    def _keep_trace(self, result: RunResult, label: str) -> str:
        """The run's trace id, set on its root span; the trace written to ``trace_dir``."""
        trace_id = uuid.uuid4().hex
        result.trace.root.set(**{"registry.eval.trace_id": trace_id, "registry.eval.label": label})
        if self.options.trace_dir is not None:
            path = self.options.trace_dir / f"{trace_id}.json"
            path.write_text(json.dumps(result.trace.as_dict(), ensure_ascii=False, default=str), encoding="utf-8")
        return trace_id


def broke(result: RunResult) -> str | None:
    """Why a run could not be judged, when it failed for a reason that is not
    the agent's: it could not start (a tool, retriever or model bound to
    nothing), or a model call failed (an outage, a timeout, a request a
    replay file does not hold). None for a run that ended by the agent's doing."""
    if result.outcome != "failed":
        return None
    if result.trace.root.attributes.get("registry.error.reason") == NotBound.reason:
        return result.error or "the run could not start"
    for span in result.trace.root.walk():
        if span.operation == "chat" and "registry.error.reason" in span.attributes:
            return result.error or span.error or "a model call failed"
    return None


def _status(run: CaseRun, verdicts: Sequence[AssertionOutcome]) -> Status:
    statuses = {verdict.status for verdict in verdicts}
    if run.error is not None:
        return ERROR
    if FAILED in statuses:
        return FAILED
    return ERROR if ERROR in statuses else PASSED


def _outcome(result: AssertionResult, *, digest: str | None = None) -> AssertionOutcome:
    assertion = result.assertion
    judge = None
    if isinstance(assertion, Judge):
        verdict = result.verdict
        judge = JudgeOutcome(
            assertion.agent,
            result.judge_digest or digest,
            score=verdict.score if verdict is not None else None,
            passed=verdict.passed if verdict is not None else None,
            min_score=assertion.min_score,
        )
    return AssertionOutcome(assertion.kind, assertion.describe(), result.status, shorten(result.reason, 500), judge)


def _dataset(planned: Planned, before: _SideRun | None, after: _SideRun) -> DatasetResult:
    head_cases = {key: slot.result() for key, slot in after.slots.items()}
    base_cases = {key: slot.result() for key, slot in before.slots.items()} if before is not None else {}
    ids = list(head_cases) + [key for key in base_cases if key not in head_cases]
    return DatasetResult(
        dataset=planned.dataset,
        agent=planned.agent,
        base=before.result() if before is not None else None,
        head=after.result(),
        cases=tuple(CaseComparison(key, base_cases.get(key), head_cases.get(key)) for key in ids),
        selected=planned.selected,
    )
