"""A tool whose definition says ``x-requires-approval: true`` waits for a
person's decision in a step run, with no approval list given to the executor;
a run that has no one to ask (``Executor.run``, ``prompt-registry run``)
never makes the call and ends ``blocked``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from registry.client import Agent
from registry.executor import Executor, PythonTools, ScriptedModel
from registry.executor.executor import StepResult
from registry.executor.journal import MemoryJournal
from tests.conftest import LibraryRepo
from tests.support.cli import run as run_cli
from tests.support.executor_fixtures import executor_for, registry_client

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

NEEDS_APPROVAL = (
    "the call of tool 'refund' needs a person's approval, which this run cannot ask for: run the agent as a task"
    " (prompt-registry agents serve) or step by step (Executor.step)"
)


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


def test_prompt_registry_run_never_makes_a_call_that_needs_approval(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"shop/refunds.yml": REFUNDS})
    work = tmp_path / "work"
    work.mkdir()
    (work / "shop_tools.py").write_text(
        "from pathlib import Path\n"
        "def refund(order):\n"
        "    Path('refunded').write_text(order)\n"
        "    return 'refunded'\n"
        "TOOLS = {'refund': refund, 'lookup': lambda order: 'paid twice'}\n",
        encoding="utf-8",
    )
    (work / "script.yml").write_text(
        json.dumps([{"content": LOOKUP}, {"when": "paid twice", "content": REFUND}, {"content": "Final Answer: ok"}]),
        encoding="utf-8",
    )
    result = run_cli(
        "run", "shop/refunds", "--repo", str(repo.path), "--input", "question=refund A-1",
        "--model", "scripted:script.yml", "--tools", "shop_tools:TOOLS", "--format", "json", cwd=work,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["outcome"], answer["output"], answer["error"]) == ("blocked", None, NEEDS_APPROVAL)
    assert not (work / "refunded").exists()
