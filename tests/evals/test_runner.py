"""The eval runner on a real git repository with two releases, through the
executor and the scripted model: sides pinned, cases compared, judges of the
same release, what cannot be judged as ``error``, --changed, --limit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.errors import ConfigurationError
from registry.evals import DatasetResult, EvalRun
from registry.evals.plan import plan
from registry.evals.reports import render_json, render_text
from registry.evals.runner import EvalRunner, RunOptions
from registry.evals.sides import open_side
from registry.executor import Executor, ScriptedModel
from registry.serving.service import RegistryService
from registry.serving.wiring import open_service
from registry.settings import Settings
from tests.conftest import AGENTS, BuiltRepos, LibraryRepo
from tests.support.eval_library import EVALS, JUDGE, REPLIES, eval_library, many_cases


@pytest.fixture
def library(repo: LibraryRepo, built_repos: BuiltRepos) -> LibraryRepo:
    return built_repos.copy(eval_library, repo)


@pytest.fixture
def service(library: LibraryRepo) -> Iterator[RegistryService]:
    with open_service(Settings(repo=str(library.path))) as opened:
        yield opened


def evaluate(
    service: RegistryService,
    library: LibraryRepo,
    *,
    head: str = "v1.1.0",
    base: str | None = "v1.0.0",
    replies: list[dict[str, Any]] = REPLIES,
    agents: tuple[str, ...] = (),
    changed: bool = False,
    **options: Any,
) -> tuple[EvalRun, ScriptedModel]:
    model = ScriptedModel.from_replies([{**reply, "repeat": True} for reply in replies], source="the test")
    head_side = open_side("head", head, service, directory=library.path)
    base_side = open_side("base", base, service, directory=library.path) if base else None
    planned = plan(head_side, base_side, agents=agents, changed=changed)

    async def run() -> EvalRun:
        async with Executor(model=model) as executor:
            return await EvalRunner(executor, RunOptions(**options)).run(head_side, base_side, planned)

    return asyncio.run(run()), model


def dataset(result: EvalRun, name: str) -> DatasetResult:
    return next(found for found in result.datasets if found.dataset == name)


def test_a_prompt_change_that_flips_a_case_is_a_regression_with_both_sides_pinned(
    service: RegistryService, library: LibraryRepo
) -> None:
    result, _ = evaluate(service, library)
    triage = dataset(result, "support/triage.yml")
    changes = {case.case_id: case.change for case in triage.cases}
    assert changes == {"refund": "regressed", "login": "unchanged"}
    refund = triage.cases[0]
    assert refund.base is not None and refund.head is not None
    assert refund.base.runs[0].output == "billing" and refund.head.runs[0].output == "general"
    failed = refund.head.runs[0].assertions[0]
    assert (failed.kind, failed.status) == ("regex", "failed") and "'general'" in failed.reason
    assert result.base is not None and result.base.tag == "v1.0.0"
    assert result.base.commit == library.git("rev-parse", "v1.0.0")
    assert result.head.commit == library.git("rev-parse", "v1.1.0")
    assert triage.base is not None and triage.base.digest != triage.head.digest
    assert triage.head.eval_file == f"{EVALS}/support/triage.yml"
    assert triage.head.eval_file_id == library.git("rev-parse", f"v1.1.0:{EVALS}/support/triage.yml")
    assert not result.gate.passed
    assert result.gate.reasons[0] == "support/triage.yml: 1 case passed on base and failed on head: refund"


def test_each_run_records_its_outcome_calls_tokens_latency_and_trace_id(
    service: RegistryService, library: LibraryRepo
) -> None:
    result, _ = evaluate(service, library, base=None)
    run = dataset(result, "support/triage.yml").cases[0].head.runs[0]  # type: ignore[union-attr]
    assert (run.label, run.outcome, run.llm_calls, run.status) == (
        "head:support/triage:refund#1",
        "completed",
        1,
        "failed",
    )
    assert run.input_tokens is not None and run.output_tokens == 1 and run.seconds > 0
    assert len(run.trace_id) == 32 and int(run.trace_id, 16) >= 0
    assert result.base is None and {case.change for d in result.datasets for case in d.cases} == {"added"}


def test_the_judge_is_an_agent_of_the_same_release_and_its_digest_is_in_the_result(
    service: RegistryService, library: LibraryRepo
) -> None:
    result, _ = evaluate(service, library, agents=("support/triage",))
    triage = dataset(result, "support/triage.yml")
    verdict = triage.cases[0].head.runs[0].assertions[1]  # type: ignore[union-attr]
    assert verdict.kind == "judge" and verdict.status == "passed" and verdict.judge is not None
    assert (verdict.judge.score, verdict.judge.min_score) == (0.9, 0.5)
    assert [pin.agent for pin in triage.head.judges] == ["evals/helpfulness"]
    assert verdict.judge.digest == triage.head.judges[0].digest
    assert verdict.reason == "score 0.9 >= 0.5: a fine label"
    assert [d.dataset for d in result.datasets] == ["support/triage.yml"]


@pytest.mark.parametrize(
    "answer",
    [
        "I think it is fine",
        '{"score": 7, "pass": true, "reason": "great"}',
        '{"score": 0.8, "pass": "yes", "reason": ""}',
    ],
)
def test_a_judge_that_answers_garbage_makes_the_assertion_an_error_never_a_pass(
    service: RegistryService, library: LibraryRepo, answer: str
) -> None:
    replies = [reply for reply in REPLIES if reply["when"] != "^Judge:"] + [{"when": "^Judge:", "content": answer}]
    result, _ = evaluate(service, library, base=None, replies=replies, agents=("support/triage",))
    refund = dataset(result, "support/triage.yml").cases[0].head
    assert refund is not None
    verdict = refund.runs[0].assertions[1]
    assert verdict.status == "error" and verdict.judge is not None and verdict.judge.digest is not None
    assert refund.runs[0].status == "failed"  # its own regex failed: a failure is still a failure
    assert dataset(result, "support/triage.yml").summary("head").judge_scores == ()


def test_a_judge_outage_makes_the_judge_assertion_an_error(service: RegistryService, library: LibraryRepo) -> None:
    outage: dict[str, Any] = {"when": "^Judge:", "error": {"status": 500, "message": "judge down"}}
    result, _ = evaluate(
        service, library, head="v1.0.0", base=None, replies=[outage, *REPLIES], agents=("support/triage",)
    )
    refund = dataset(result, "support/triage.yml").cases[0].head
    assert refund is not None and refund.status == "error"
    verdict = refund.runs[0].assertions[1]
    assert verdict.status == "error" and verdict.reason.startswith(
        "the judge broke: the model call for evals/helpfulness failed"
    )
    assert refund.runs[0].assertions[0].status == "passed"


def test_a_model_outage_makes_cases_errors_and_stops_the_gate(service: RegistryService, library: LibraryRepo) -> None:
    outage: dict[str, Any] = {"when": "log in", "error": {"status": 503, "message": "overloaded"}}
    replies = [outage, *REPLIES]
    result, _ = evaluate(service, library, replies=replies, agents=("support/triage",))
    login = dataset(result, "support/triage.yml").cases[1]
    assert login.change == "error" and login.head is not None and login.head.status == "error"
    run = login.head.runs[0]
    assert run.error is not None and "overloaded" in run.error
    assert {a.status for a in run.assertions} == {"error"}
    assert "support/triage.yml: 1 case could not be judged on head (error): login" in result.gate.reasons
    assert dataset(result, "support/triage.yml").summary("head").pass_rate == 0.0  # the error is left out


def test_a_run_that_could_not_start_for_a_tool_bound_to_nothing_is_an_error_not_a_failure(
    service: RegistryService, library: LibraryRepo
) -> None:
    library.write(
        "support/lookup.yml",
        "name: Lookup\ntype: tool_calling\nmodel: {name: gpt-test}\nprompt_templates: {user: 'Order {{ order }}'}\n"
        "inputs: {type: object, required: [order], properties: {order: {type: string}}}\n"
        "tools: [{name: lookup_order, description: Finds an order., parameters: {type: object}}]\n",
    )
    library.write(f"{EVALS}/support/lookup.yml", "cases:\n  - id: a1\n    inputs: {order: A-1}\n", under_agents=False)
    result, _ = evaluate(service, library, head="worktree", base=None, agents=("support/lookup",))
    [case] = dataset(result, "support/lookup.yml").cases
    assert case.head is not None and case.head.status == "error"
    [run] = case.head.runs
    assert run.error is not None and "no implementation bound for tool lookup_order" in run.error
    assert run.llm_calls == 0  # nothing was asked: the run never started
    assert "support/lookup.yml: 1 case could not be judged on head (error): a1" in result.gate.reasons


def test_an_invalid_definition_in_the_working_tree_is_named_and_nothing_runs_for_it(
    service: RegistryService, library: LibraryRepo
) -> None:
    library.write("support/triage.yml", "name: Triage\nprompt_templatse: {}\n")
    result, _ = evaluate(service, library, head="worktree", agents=("support/triage",))
    triage = dataset(result, "support/triage.yml")
    assert triage.head.problem is not None and "support/triage is not a valid definition in the working tree" in (
        triage.head.problem
    )
    assert triage.cases == () and triage.head.digest is None
    assert triage.base is not None and triage.base.digest is not None  # base was not run either
    assert result.gate.reasons == (f"support/triage.yml: nothing ran on head: {triage.head.problem}",)


def test_changed_picks_the_agents_whose_digest_or_eval_file_differs(
    service: RegistryService, library: LibraryRepo
) -> None:
    result, _ = evaluate(service, library, changed=True)
    picked = {found.dataset: found.selected for found in result.datasets}
    assert picked == {"support/faq.yml": ("eval file changed",), "support/triage.yml": ("definition changed",)}
    faq = dataset(result, "support/faq.yml")
    assert {case.case_id: case.change for case in faq.cases} == {"hours": "unchanged", "phone": "added"}


def test_a_changed_judge_changes_nothing_but_the_judge_digest_in_the_result(
    service: RegistryService, library: LibraryRepo
) -> None:
    library.write("evals/helpfulness.yml", JUDGE.replace("You grade", "You carefully grade"))
    result, _ = evaluate(service, library, head="worktree", agents=("support/triage",))
    triage = dataset(result, "support/triage.yml")
    assert triage.base is not None and triage.base.judges[0].digest != triage.head.judges[0].digest
    assert triage.base.digest != triage.head.digest  # triage itself changed between v1.0.0 and the working tree


def test_limit_reads_only_the_first_cases_of_a_large_file(service: RegistryService, library: LibraryRepo) -> None:
    library.write(f"{EVALS}/support/greeter.yml", many_cases(100_000), under_agents=False)
    library.commit("a large dataset")
    library.tag("v1.2.0")
    result, _ = evaluate(service, library, head="v1.2.0", base=None, agents=("support/greeter",), limit=5)
    greeter = dataset(result, "support/greeter.yml")
    assert [case.case_id for case in greeter.cases] == ["c0", "c1", "c2", "c3", "c4"]
    assert greeter.head.complete is False and greeter.summary("head").passed == 5


def test_repeat_runs_every_case_so_many_times_each_with_its_label(
    service: RegistryService, library: LibraryRepo
) -> None:
    result, _ = evaluate(service, library, base=None, agents=("support/greeter",), repeat=3)
    hello = dataset(result, "support/greeter.yml").cases[0].head
    assert hello is not None and [run.label for run in hello.runs] == [
        f"head:support/greeter:hello#{n}" for n in (1, 2, 3)
    ]


def test_an_unknown_agent_is_refused_with_a_did_you_mean(service: RegistryService, library: LibraryRepo) -> None:
    with pytest.raises(ConfigurationError, match=r"support/triag is not an agent .*did you mean 'support/triage'\?"):
        evaluate(service, library, agents=("support/triag",))
    library.write("support/lonely.yml", (library.path / AGENTS / "support/faq.yml").read_text(encoding="utf-8"))
    with pytest.raises(ConfigurationError, match=r"support/lonely has no eval file in the working tree"):
        evaluate(service, library, head="worktree", agents=("support/lonely",))


def test_the_text_and_json_reports_say_what_changed_and_why_the_gate_failed(
    service: RegistryService, library: LibraryRepo, tmp_path: Path
) -> None:
    result, _ = evaluate(service, library, agents=("support/triage",))
    text = render_text(result)
    assert text.startswith("eval base v1.0.0 (")
    assert "  cases 2/2 passed → 1/2 passed (1 regressed) · pass rate 100% → 50%\n" in text
    assert "  ✗ regressed  refund  ai_gateway/evals/support/triage.yml:3:5\n" in text
    assert "      head: failed: matches /^billing$/: the output does not match /^billing$/: 'general'\n" in text
    assert text.endswith("  support/triage.yml: the pass rate fell from 100% to 50%, more than the tolerance of 0%\n")
    assert '"change": "regressed"' in render_json(result)


def test_each_trace_is_written_under_its_id_with_the_run_label(
    service: RegistryService, library: LibraryRepo, tmp_path: Path
) -> None:
    result, _ = evaluate(service, library, base=None, agents=("support/greeter",), trace_dir=tmp_path)
    run = dataset(result, "support/greeter.yml").cases[0].head.runs[0]  # type: ignore[union-attr]
    trace = json.loads((tmp_path / f"{run.trace_id}.json").read_text(encoding="utf-8"))
    assert trace["attributes"]["registry.eval.trace_id"] == run.trace_id
    assert trace["attributes"]["registry.eval.label"] == "head:support/greeter:hello#1"
    assert trace["attributes"]["registry.release.tag"] == "v1.1.0"


GATED = """\
name: Gated
inputs: {type: object, required: [question], properties: {question: {type: string}}}
pattern:
  kind: chain
  steps:
    - {id: draft, agent: support/draft, inputs: {question: "{{ inputs.question }}"}}
    - {id: gate, agent: support/gate, inputs: {reply: "{{ steps.draft.output }}"}, gate: {on_block: "Sorry."}}
"""
GATED_CASES = """\
cases:
  - id: refund
    inputs: {question: "Can I get a refund?"}
    expect: [{outcome: completed}, {contains: Refund}, {max_llm_calls: 2}]
"""
GATED_REPLIES = [
    *REPLIES,
    {"when": "^Draft", "content": "Refund issued."},
    {"when": "^Check:", "content": '{"allow": true}'},
]


def test_a_composite_is_evaluated_like_a_leaf_and_picked_when_an_agent_it_runs_changed(
    service: RegistryService, library: LibraryRepo
) -> None:
    draft = 'name: Draft\nmodel: {name: gpt-test}\nprompt_templates: {user: "Draft: {{ question }}"}\n'
    library.write("support/draft.yml", draft)
    library.write(
        "support/gate.yml",
        'name: Gate\nmodel: {name: gpt-test}\nprompt_templates: {user: "Check: {{ reply }}"}\n'
        "output_parser: {type: json, output_schema: {type: object, required: [allow], properties: {allow: {type: boolean}}}}\n",
    )
    library.write("support/gated.yml", GATED)
    library.write(f"{EVALS}/support/gated.yml", GATED_CASES, under_agents=False)
    library.commit("a gated chain")
    library.tag("v1.2.0")
    library.write("support/draft.yml", draft.replace("Draft: ", "Draft an answer: "))
    result, _ = evaluate(service, library, head="worktree", base="v1.2.0", replies=GATED_REPLIES, changed=True)
    assert [(found.dataset, found.selected) for found in result.datasets] == [
        ("support/gated.yml", ("definition changed",))
    ]
    gated = dataset(result, "support/gated.yml")
    run = gated.cases[0].head.runs[0]  # type: ignore[union-attr]
    assert (run.status, run.outcome, run.llm_calls, run.output) == ("passed", "completed", 2, "Refund issued.")
    assert gated.cases[0].change == "unchanged" and result.gate.passed


def test_a_binding_that_cannot_be_made_stops_the_evaluation_with_its_error(
    service: RegistryService, library: LibraryRepo
) -> None:
    head = open_side("head", "v1.1.0", service, directory=library.path)
    planned = plan(head, None)

    # Imported here: the MCP SDK's import is most of a second of every pytest worker's collection.
    from registry.executor.mcp_tools import McpTools

    async def run() -> EvalRun:
        model = ScriptedModel.from_replies([{**reply, "repeat": True} for reply in REPLIES], source="the test")
        async with Executor(model=model, tools=[McpTools("broken", "/nonexistent/command")]) as executor:
            return await EvalRunner(executor, RunOptions(concurrency=1)).run(head, None, planned)

    with pytest.raises(ConfigurationError, match="--mcp broken: cannot run '/nonexistent/command'"):
        asyncio.run(run())
