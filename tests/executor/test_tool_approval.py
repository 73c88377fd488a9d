"""A tool whose definition says ``x-requires-approval: true`` waits for a
person's decision in a step run, with no approval list given to the executor;
a run that has no one to ask (``Executor.run``; ``prompt-registry run``:
tests/integration/test_tool_approval_cli.py) never makes the call and ends
``blocked``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from registry.client import Agent
from registry.executor import Executor, PythonTools, ScriptedModel
from registry.executor.executor import StepResult
from registry.executor.journal import MemoryJournal
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for, registry_client
from tests.support.refunds_agent import LOOKUP, NEEDS_APPROVAL, REFUND, REFUNDS


def _steps(agent: Agent, replies: list[dict[str, Any]], decision: dict[str, Any]) -> tuple[list[StepResult], list[str]]:
    calls: list[str] = []
    tools = PythonTools(
        {
            "refund": lambda order: calls.append(f"refund {order}") or "refunded",  # type: ignore[func-returns-value]
            "lookup": lambda order: calls.append(f"lookup {order}") or "paid twice",  # type: ignore[func-returns-value]
        }
    )
    journal = MemoryJournal()

    async def run() -> list[StepResult]:
        done: list[StepResult] = []
        async with Executor(model=ScriptedModel.from_replies(replies, source="t"), tools=[tools]) as executor:
            while not done or not done[-1].is_last:
                assert len(done) < 10, "the run does not end"
                result = await executor.astep(agent, {"question": "refund A-1"}, journal=journal)
                if result.action is not None:
                    assert calls == ["lookup A-1"], "the tool ran before its decision"
                    journal.record(result.action.key, decision)
                done.append(result)
        return done

    return asyncio.run(run()), calls


def test_the_definition_alone_makes_a_tool_wait_for_approval(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"shop/refunds.yml": REFUNDS})
    replies = [
        {"content": LOOKUP},
        {"when": "paid twice", "content": REFUND},
        {"when": "^Observation: refunded$", "content": "Final Answer: refunded A-1"},
    ]
    with registry_client(repo.path) as client:
        done, calls = _steps(client.get("shop", "refunds", release="v1.0.0"), replies, {"decision": "approve"})
    actions = [s.action for s in done if s.action is not None]
    assert [(a.tool, a.arguments) for a in actions] == [("refund", {"order": "A-1"})]
    assert calls == ["lookup A-1", "refund A-1"]  # lookup needs no approval
    final = done[-1].result
    assert final is not None and (final.outcome, final.output) == ("completed", "refunded A-1")


def test_a_rejected_call_is_never_made(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"shop/refunds.yml": REFUNDS})
    replies = [
        {"content": LOOKUP},
        {"when": "paid twice", "content": REFUND},
        {"when": "rejected this call: not today", "content": "Final Answer: no refund"},
    ]
    with registry_client(repo.path) as client:
        agent = client.get("shop", "refunds", release="v1.0.0")
        done, calls = _steps(agent, replies, {"decision": "reject", "reason": "not today"})
    assert calls == ["lookup A-1"]
    final = done[-1].result
    assert final is not None and final.output == "no refund"


# --- runs with no one to ask ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "options"),
    [
        (REFUNDS, {}),
        (REFUNDS.replace("    x-requires-approval: true\n", ""), {"require_approval": {"refund"}}),
    ],
    ids=["x-requires-approval", "require_approval"],
)
def test_a_run_never_makes_a_call_that_needs_approval_and_ends_blocked(
    repo: LibraryRepo, definition: str, options: dict[str, Any]
) -> None:
    repo.release("v1.0.0", {"shop/refunds.yml": definition})
    calls: list[str] = []
    tools = PythonTools(
        {
            "refund": lambda order: calls.append(f"refund {order}") or "refunded",  # type: ignore[func-returns-value]
            "lookup": lambda order: calls.append(f"lookup {order}") or "paid twice",  # type: ignore[func-returns-value]
        }
    )
    replies = [{"content": LOOKUP}, {"when": "paid twice", "content": REFUND}, {"content": "Final Answer: refunded"}]
    with executor_for(repo.path, replies, tools=[tools], **options) as executor:
        result = executor.run("shop/refunds", {"question": "refund A-1"})
    assert calls == ["lookup A-1"]
    assert (result.outcome, result.output, result.error) == ("blocked", None, NEEDS_APPROVAL)
    [span] = [s for s in result.trace.spans("execute_tool") if s.attributes["gen_ai.tool.name"] == "refund"]
    assert span.status == "error" and span.attributes["registry.tool.status"] == "needs_approval"
    assert result.llm_calls == 2
