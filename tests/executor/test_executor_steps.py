"""Runs that advance step by step: a journal replayed, one live model round
per step, actions that wait for a decision."""

from __future__ import annotations

import asyncio
from typing import Any

from registry.client import Agent
from registry.executor import Executor, PythonTools, ScriptedModel
from registry.executor.executor import StepResult
from registry.executor.journal import MemoryJournal
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import CLASSIFIER_LEAF, REACT, registry_client, vote_composite
from tests.support.gated_answer import DRAFT, GATE, GATED

ACTION = 'Thought: look\nAction: lookup\nAction Input: {"word": "ox"}'


def steps(agent: Agent, inputs: dict[str, Any], replies: list[dict[str, Any]], **options: Any) -> list[StepResult]:
    """Every step of a run to its end (a pending action is approved)."""
    calls: list[str] = options.pop("calls", [])
    tools = PythonTools({"lookup": lambda word: calls.append(word) or f"{word} means something"})  # type: ignore[func-returns-value]
    journal = MemoryJournal()

    async def run() -> list[StepResult]:
        done: list[StepResult] = []
        async with Executor(
            model=ScriptedModel.from_replies(replies, source="t"), tools=[tools], **options
        ) as executor:
            while not done or not done[-1].is_last:
                assert len(done) < 20, "the run does not end"
                result = await executor.astep(agent, inputs, journal=journal)
                if result.action is not None:
                    journal.record(result.action.key, {"decision": "approve"})
                done.append(result)
        return done

    return asyncio.run(run())


def test_a_chain_takes_one_step_per_model_round_and_replays_the_rest(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"support/draft.yml": DRAFT, "support/gate.yml": GATE, "support/gated.yml": GATED})
    replies = [
        {"agent": "support/draft", "content": "drafted"},
        {"agent": "support/gate", "content": '{"allow": true}'},
    ]
    with registry_client(repo.path) as client:
        result = steps(client.get("support", "gated", release="v1.0.0"), {"question": "q"}, replies)
    assert [(s.is_last, s.replies) for s in result] == [(False, ("drafted",)), (True, ('{"allow": true}',))]
    assert result[-1].result is not None and result[-1].result.output == "drafted"


def test_a_react_loop_takes_one_step_per_round_with_its_tool_call(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/react.yml": REACT})
    calls: list[str] = []
    replies = [{"content": ACTION}, {"when": "ox means something", "content": "Final Answer: an animal"}]
    with registry_client(repo.path) as client:
        result = steps(client.get("a", "react", release="v1.0.0"), {"question": "ox?"}, replies, calls=calls)
    assert [s.is_last for s in result] == [False, True]
    assert calls == ["ox"]  # made in the first step, replayed in the second


def test_a_tool_that_needs_approval_ends_the_step_and_runs_once_approved(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/react.yml": REACT})
    calls: list[str] = []
    replies = [{"content": ACTION}, {"when": "ox means something", "content": "Final Answer: an animal"}]
    with registry_client(repo.path) as client:
        result = steps(
            client.get("a", "react", release="v1.0.0"),
            {"question": "ox?"},
            replies,
            calls=calls,
            require_approval={"lookup"},
        )
    first = result[0]
    assert first.action is not None and (first.action.tool, first.action.arguments) == ("lookup", {"word": "ox"})
    assert [s.is_last for s in result] == [False, True] and calls == ["ox"]


def test_parallel_branches_that_start_together_share_a_step(repo: LibraryRepo) -> None:
    repo.release(
        "v1.0.0", {"s/classify.yml": CLASSIFIER_LEAF, "s/vote.yml": vote_composite("s/classify", n=3, concurrency=3)}
    )
    replies = [{"content": '{"label": "tech"}', "delay": 0.05, "repeat": True}]
    with registry_client(repo.path) as client:
        result = steps(client.get("s", "vote", release="v1.0.0"), {"question": "q"}, replies)
    assert len(result) == 1 and len(result[0].replies) == 3 and result[0].is_last


def test_one_at_a_time_branches_take_a_step_each(repo: LibraryRepo) -> None:
    repo.release(
        "v1.0.0", {"s/classify.yml": CLASSIFIER_LEAF, "s/vote.yml": vote_composite("s/classify", n=3, concurrency=1)}
    )
    replies = [{"content": '{"label": "tech"}', "repeat": True}]
    with registry_client(repo.path) as client:
        result = steps(client.get("s", "vote", release="v1.0.0"), {"question": "q"}, replies)
    assert [len(s.replies) for s in result] == [1, 1, 1] and result[-1].is_last


def test_a_tool_started_and_never_finished_is_not_made_again(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/react.yml": REACT})
    calls: list[str] = []
    journal = MemoryJournal()
    journal.record("/chat:1", {"kind": "model", "reply": {"content": ACTION}})
    journal.record("/chat:1/tool:0", {"kind": "tool", "status": "started", "arguments": {"word": "ox"}})
    replies = [{"when": "^Observation: Error: the call of lookup was interrupted", "content": "Final Answer: unknown"}]
    tools = PythonTools({"lookup": lambda word: calls.append(word) or "x"})  # type: ignore[func-returns-value]

    async def run() -> StepResult:
        async with Executor(model=ScriptedModel.from_replies(replies, source="t"), tools=[tools]) as executor:
            return await executor.astep(agent, {"question": "ox?"}, journal=journal)

    with registry_client(repo.path) as client:
        agent = client.get("a", "react", release="v1.0.0")
        result = asyncio.run(run())
    assert result.is_last and result.output == "unknown" and calls == []
    assert journal.events["/chat:1/tool:0"]["result"]["status"] == "interrupted"


def test_a_step_run_takes_the_agent_by_name_and_keeps_to_its_first_release(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"a/react.yml": REACT})
    replies = [
        {"when": "^ox\\?$", "content": ACTION},
        {"when": "ox means something", "content": "Final Answer: an animal"},
    ]
    journal = MemoryJournal()
    tools = PythonTools({"lookup": lambda word: f"{word} means something"})
    model = ScriptedModel.from_replies(replies, source="t")
    with registry_client(repo.path) as client, Executor(model=model, registry=client, tools=[tools]) as executor:
        first = executor.step("a/react", {"question": "ox?"}, journal=journal)
        # Published between the steps: the run goes on at the release it began with.
        repo.release("v2.0.0", {"a/react.yml": REACT.replace('user: "{{ question }}"', 'user: "CHANGED"')})
        last = executor.step("a/react", {"question": "ox?"}, journal=journal)
    assert (first.is_last, last.is_last) == (False, True)
    assert last.result is not None and (last.result.output, last.result.release.release.tag) == ("an animal", "v1.0.0")
    assert journal.events["/release"]["tag"] == "v1.0.0"


def test_astep_takes_the_agent_by_name(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/draft.yml": DRAFT})

    async def run() -> StepResult:
        async with Executor(
            model=ScriptedModel.from_replies([{"content": "drafted"}], source="t"), registry=client
        ) as executor:
            return await executor.astep("s/draft", {"question": "q"}, journal=MemoryJournal(), release="v1.0.0")

    with registry_client(repo.path, release="v1.0.0") as client:
        result = asyncio.run(run())
    assert result.is_last and result.output == "drafted"


def test_a_repair_round_is_a_step_of_its_own_and_replays_as_a_model_round(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"support/draft.yml": DRAFT, "support/gate.yml": GATE, "support/gated.yml": GATED})
    replies = [
        {"agent": "support/draft", "content": "drafted"},
        {"agent": "support/gate", "when": "^Check this reply", "content": "allowed, I think"},
        {"agent": "support/gate", "when": "^Your reply is not valid JSON", "content": '{"allow": true}'},
    ]
    journal = MemoryJournal()
    model = ScriptedModel.from_replies(replies, source="t")
    done: list[StepResult] = []
    with registry_client(repo.path) as client, Executor(model=model, registry=client) as executor:
        while not done or not done[-1].is_last:
            assert len(done) < 5, "the run does not end"
            done.append(executor.step("support/gated", {"question": "q"}, journal=journal))
    assert [s.replies for s in done] == [("drafted",), ("allowed, I think",), ('{"allow": true}',)]
    assert done[-1].result is not None and (done[-1].result.outcome, done[-1].result.output) == ("completed", "drafted")
    gate_rounds = sorted(key for key in journal.events if key.startswith("/step 'gate'/chat:"))
    assert gate_rounds == ["/step 'gate'/chat:1", "/step 'gate'/chat:2"]
    assert journal.events["/step 'gate'/chat:2"]["reply"]["content"] == '{"allow": true}'
    # The last step replayed the gate's first reply and asked only for the repair.
    [gate] = [
        s for s in done[-1].run_trace.spans("invoke_agent") if s.attributes["gen_ai.agent.name"] == "support/gate"
    ]
    first, repair = [span for span in gate.children if span.operation in ("chat", "repair")]
    assert (first.operation, first.attributes.get("registry.replayed")) == ("chat", True)
    assert repair.operation == "repair" and "registry.replayed" not in repair.children[0].attributes
