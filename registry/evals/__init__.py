"""Evaluations: datasets of cases in the library, the assertions on a run of
each, the runner that compares two releases on them, and its reports.

An eval file, ``<evals root>/<usecase>/<name>.yml`` beside the agents root
(``ai_gateway/evals`` for ``ai_gateway/agents``), holds cases for the agent
``<usecase>/<name>`` (or the one ``agent:`` names); every release carries its
datasets. Its format is ``schemas/eval.v1.schema.json`` and docs/evals.md.

The modules, by concern:

- ``dataset``: the typed, frozen values of a file: ``EvalHeader`` (``agent``,
  ``description``, ``Defaults``), ``EvalCase`` (``id``, ``inputs``,
  ``history`` of ``Turn``, ``expect``, ``repeat``, ``tags``) or
  ``InvalidCase``, and one class per assertion kind (``Contains``,
  ``NotContains``, ``JsonSchema``, ``Equals``, ``Regex``, ``ToolCalled``,
  ``OutcomeIs``, ``MaxLlmCalls``: the ``LocalAssertion``; and ``Judge``);
  where eval files are (``evals_root``, ``agent_of_path``, ``eval_path``).
- ``reading``: ``open_eval_file`` / ``EvalFile``: the header at once, the
  cases streamed one at a time in bounded memory (``entries`` for every case
  or why it cannot run, ``cases`` for a runner, both with a ``limit``), every
  problem an ``Issue`` at file:line:column with "did you mean";
  ``expectations`` reads each assertion (RE2 patterns compiled, schemas
  checked) and ``problems`` collects the issues.
- ``assertions``: ``CaseRun`` (what one run did; ``CaseRun.of`` reads the
  executor's ``RunResult``), ``check`` of a ``LocalAssertion`` into an
  ``AssertionResult`` (``passed``, ``failed`` with a reason, or ``error``).
- ``judge``: what makes an agent a judge (``judge_problems``), the
  ``JudgeRequest`` a runner sends it, and ``judged``, its reply read into an
  ``AssertionResult`` (a garbage verdict is ``error``).
- ``results``: what an evaluation found, as typed frozen values that every
  report reads, each with ``as_json()``: ``EvalRun`` (both sides'
  ``ReleasePin``, ``RunSettings``, the ``Gate``) holds a ``DatasetResult``
  per eval file (each side's ``DatasetSide``: digest, eval file, judges'
  ``JudgePin``, or why nothing ran), a ``CaseComparison`` per case id (its
  ``Change``: ``regressed``, ``fixed``, ...), each side's ``CaseResult``,
  its runs' ``RunRecord`` (output, outcome, calls, tokens, latency, trace
  id) and their ``AssertionOutcome`` (with a judge's ``JudgeOutcome``);
  ``SideSummary`` works out pass rates, tokens and judge scores from them.
- ``sides``: ``open_side`` resolves a ref once (a release, range, channel,
  or ``worktree``) into a ``Side``: its ``ReleasePin``, its agents as the
  executor runs them (``runnable.agent_at``), and its eval files
  (``Datasets``: from git, streamed, or from disk) with their blob ids.
- ``plan``: which eval files run (``plan`` gives a ``Planned`` each): those
  of the agents named, or all of head's, or those that changed (``--changed``).
- ``runner``: ``EvalRunner(executor, RunOptions).run(head, base, planned)``
  gives the ``EvalRun``: cases streamed, at most ``concurrency`` in flight,
  each run labelled for recording and replay, judges of the same side,
  outages as ``error``; ``gate`` says what ``--fail-on`` makes of it.
- ``stats``: ``bootstrap_change``, the seeded bootstrap interval of a judge
  score's change, cases resampled in pairs.
- ``reports``: the run for a reader, one function a format in
  ``reports.RENDERERS``: text for a terminal (``reports.text``), a merge
  request note (``reports.markdown``), JUnit XML (``reports.junit``), JSON,
  and one HTML page with word diffs (``reports.html``, ``reports.worddiff``);
  what they all say alike is ``reports.facts``.

Reading an eval file (what lint does) imports no executor: only ``runner``
imports it, and this package's own imports leave ``runner``, ``sides`` and
``plan`` out (import them by module); ``CaseRun.of`` only reads the
``RunResult`` it is given.

May import: errors, models, settings, format, rendering, store, executor,
client and providers. Nothing of the service, the HTTP layer or the CLI: a
side's releases are resolved through the service handed to ``open_side``
(``sides.Releases``), since the UI (in ``registry.serving``) lists eval
cases through ``dataset`` and ``reading``.
"""

from __future__ import annotations

from registry.evals.assertions import (
    AssertionResult,
    CaseRun,
    JudgeVerdict,
    Status,
    ToolCallMade,
    check,
)
from registry.evals.dataset import (
    ASSERTION_KINDS,
    OUTCOMES,
    Assertion,
    Contains,
    Defaults,
    Equals,
    EvalCase,
    EvalHeader,
    InvalidCase,
    JsonSchema,
    Judge,
    LocalAssertion,
    MaxLlmCalls,
    NotContains,
    OutcomeIs,
    Regex,
    ToolCalled,
    Turn,
    agent_of_path,
    eval_path,
    evals_root,
)
from registry.evals.judge import JUDGE_INPUTS, JudgeRequest, before_judging, judge_problems, judge_request, judged
from registry.evals.reading import EvalFile, EvalLimits, open_eval_file
from registry.evals.results import (
    AssertionOutcome,
    CaseComparison,
    CaseResult,
    Change,
    DatasetResult,
    DatasetSide,
    EvalRun,
    FailOn,
    Gate,
    JudgeOutcome,
    JudgePin,
    ReleasePin,
    RunRecord,
    RunSettings,
    SideName,
    SideSummary,
)

__all__ = [
    "ASSERTION_KINDS",
    "JUDGE_INPUTS",
    "OUTCOMES",
    "Assertion",
    "AssertionOutcome",
    "AssertionResult",
    "CaseComparison",
    "CaseResult",
    "CaseRun",
    "Change",
    "Contains",
    "DatasetResult",
    "DatasetSide",
    "Defaults",
    "Equals",
    "EvalCase",
    "EvalFile",
    "EvalHeader",
    "EvalLimits",
    "EvalRun",
    "FailOn",
    "Gate",
    "InvalidCase",
    "JsonSchema",
    "Judge",
    "JudgeOutcome",
    "JudgePin",
    "JudgeRequest",
    "JudgeVerdict",
    "LocalAssertion",
    "MaxLlmCalls",
    "NotContains",
    "OutcomeIs",
    "Regex",
    "ReleasePin",
    "RunRecord",
    "RunSettings",
    "SideName",
    "SideSummary",
    "Status",
    "ToolCallMade",
    "ToolCalled",
    "Turn",
    "agent_of_path",
    "before_judging",
    "check",
    "eval_path",
    "evals_root",
    "judge_problems",
    "judge_request",
    "judged",
    "open_eval_file",
]
