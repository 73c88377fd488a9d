"""A step's sink (``Executor.astep(sink=...)``): the events the step makes
live, as they happen, and none of what it replays from the journal."""

from __future__ import annotations

import asyncio
from typing import Any

from registry.client import Agent
from registry.executor import Executor, PythonTools, ScriptedModel
from registry.executor.events import Event, TextEvent, ToolCallEvent, ToolResultEvent
from registry.executor.journal import MemoryJournal
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import REACT, leaf, registry_client
from tests.support.gated_answer import DRAFT, GATE, GATED

ACTION = 'Thought: look\nAction: lookup\nAction Input: {"word": "ox"}'


class ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def put(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


def stepped(agent: Agent, inputs: dict[str, Any], replies: list[dict[str, Any]]) -> list[ListSink]:
    """Each step's sink, for every step of a run to its end (an action is approved)."""
    tools = PythonTools({"lookup": lambda word: f"{word} means something"})
    journal = MemoryJournal()

    async def run() -> list[ListSink]:
        sinks: list[ListSink] = []
        async with Executor(model=ScriptedModel.from_replies(replies, source="t"), tools=[tools]) as executor:
            while True:
                assert len(sinks) < 20, "the run does not end"
                sinks.append(ListSink())
                result = await executor.astep(agent, inputs, journal=journal, sink=sinks[-1])
                if result.is_last:
                    return sinks

    return asyncio.run(run())


def test_a_react_step_gives_its_tool_call_and_result_and_the_next_step_does_not_give_them_again(
    repo: LibraryRepo,
) -> None:
    repo.release("v1.0.0", {"a/react.yml": REACT})
    replies = [{"content": ACTION}, {"when": "ox means something", "content": "Final Answer: an animal"}]
    with registry_client(repo.path) as client:
        first, second = stepped(client.get("a", "react", release="v1.0.0"), {"question": "ox?"}, replies)
    [call] = first.of(ToolCallEvent)
    [result] = first.of(ToolResultEvent)
    assert (call.tool, call.arguments, result.status, result.output) == (
        "lookup",
        {"word": "ox"},
        "ok",
        "ox means something",
    )
    assert first.of(TextEvent) == []
    assert second.of(ToolCallEvent) == [] and second.of(ToolResultEvent) == []
    assert "".join(event.text for event in second.of(TextEvent)) == "an animal"


def test_a_streamed_answer_reaches_the_sink_piece_by_piece(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"s/answer.yml": leaf("answer", "Answer: {{ question }}", question="string")})
    answer = "An ox is a large domesticated bovine, kept for draught work."
    with registry_client(repo.path) as client:
        [only] = stepped(client.get("s", "answer", release="v1.0.0"), {"question": "ox?"}, [{"content": answer}])
    pieces = [event.text for event in only.of(TextEvent)]
    assert len(pieces) > 1 and "".join(pieces) == answer


def test_a_gated_answer_reaches_the_sink_only_in_the_step_whose_gate_allows_it(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"support/draft.yml": DRAFT, "support/gate.yml": GATE, "support/gated.yml": GATED})
    replies = [
        {"agent": "support/draft", "content": "drafted"},
        {"agent": "support/gate", "content": '{"allow": true}'},
    ]
    with registry_client(repo.path) as client:
        first, second = stepped(client.get("support", "gated", release="v1.0.0"), {"question": "q"}, replies)
    assert first.of(TextEvent) == []
    assert "".join(event.text for event in second.of(TextEvent)) == "drafted"
