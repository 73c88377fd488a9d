"""A tool whose definition says ``x-requires-approval: true`` waits for a
person's decision in a step run, with no approval list given to the executor."""

from __future__ import annotations

import asyncio
from typing import Any

from registry.client import Agent
from registry.executor import Executor, PythonTools, ScriptedModel
from registry.executor.executor import StepResult
from registry.executor.journal import MemoryJournal
from tests.conftest import LibraryRepo
from tests.executor_fixtures import registry_client

REFUNDS = """\
name: Refunds
type: react
max_iterations: 3
output_parser: {type: react_text}
model: {name: test-model}
tools:
  - name: refund
    description: Refunds an order.
    parameters: {type: object, required: [order], properties: {order: {type: string}}}
    x-requires-approval: true
  - name: lookup
    description: Looks an order up.
    parameters: {type: object, required: [order], properties: {order: {type: string}}}
prompt_templates:
  system: Use the tools. Reply with Thought/Action/Action Input or Final Answer.
  user: "{{ question }}"
inputs: {type: object, required: [question], properties: {question: {type: string}}}
"""
LOOKUP = 'Thought: check it\nAction: lookup\nAction Input: {"order": "A-1"}'
REFUND = 'Thought: pay it back\nAction: refund\nAction Input: {"order": "A-1"}'


def _steps(agent: Agent, replies: list[dict[str, Any]], decision: dict[str, Any]) -> tuple[list[StepResult], list[str]]:
    calls: list[str] = []
    tools = PythonTools(
        {
            "refund": lambda order: calls.append(f"refund {order}") or "refunded",
            "lookup": lambda order: calls.append(f"lookup {order}") or "paid twice",
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
