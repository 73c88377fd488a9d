"""Placeholders after Jinja at run time: the seed's chat/minimal runs as a
ReAct agent whose scratchpad grows in its assistant message every round;
{chat_history} takes a conversation's turns as text; a placeholder nothing
fills stops the run before its first call (through a real OpenAI-compatible
server: tests/integration/test_executor_placeholders_openai.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from registry.executor import COMPLETED, FAILED, PythonTools
from registry.executor.executor import RunResult
from tests.conftest import LibraryRepo
from tests.support.executor_fixtures import executor_for
from tests.support.seed_agent import SEED_REPLIES, SEED_TOOLS, scratchpad_after

QUESTION = "Is gitlab-org/gitlab#12 fixed by merge trains?"


def _rounds(result: RunResult) -> list[list[dict[str, Any]]]:
    """The messages of each model call, rebuilt from the trace: a call's
    span carries the messages new to it, after those it shares with the last."""
    rounds: list[list[dict[str, Any]]] = []
    previous: list[dict[str, Any]] = []
    for chat in sorted(result.trace.spans("chat"), key=lambda span: span.started):
        new = chat.attributes["registry.input_messages"]
        messages = previous[: chat.attributes["registry.input_message_count"] - len(new)] + new
        rounds.append(messages)
        previous = messages
    return rounds


def test_the_seeds_agent_runs_as_react_rendering_its_scratchpad_again_each_round(example: Path) -> None:
    with executor_for(example, SEED_REPLIES, tools=[SEED_TOOLS]) as executor:
        result = executor.run("chat/minimal", {"question": QUESTION})
    assert result.outcome == COMPLETED, result.trace.as_text()
    assert result.output == "Yes: merge trains test each merge request on top of the ones ahead of it."
    assert result.llm_calls == 3
    first, second, third = _rounds(result)
    # The seed's order (system, assistant, user), every round: no turn is appended.
    assert [[m["role"] for m in messages] for messages in (first, second, third)] == [
        ["system", "assistant", "user"]
    ] * 3
    assert first[1] == {"role": "assistant", "content": "\nThought:"}
    assert all(
        messages[2] == {"role": "user", "content": f"Question: {QUESTION}"} for messages in (first, second, third)
    )
    assert first[0] == second[0] == third[0]
    assert "<name>issue_reader</name>" in first[0]["content"]
    assert second[1]["content"] == scratchpad_after(1) + "\nThought:"
    assert third[1]["content"] == scratchpad_after(2) + "\nThought:"
    assert third[1]["content"].startswith(second[1]["content"].removesuffix("\nThought:"))
    # Each call's span carries the messages from the first that changed.
    spans = sorted(result.trace.spans("chat"), key=lambda span: span.started)
    assert [len(span.attributes["registry.input_messages"]) for span in spans] == [3, 2, 2]
    [agent] = result.trace.spans("invoke_agent")
    assert agent.attributes["registry.placeholders"] == ["agent_scratchpad"]


def test_a_placeholder_nothing_fills_stops_the_run_before_its_first_call(example: Path) -> None:
    with executor_for(example, SEED_REPLIES, tools=[SEED_TOOLS]) as executor:
        result = executor.run("chat/minimal", {})
    assert (result.outcome, result.llm_calls) == (FAILED, 0)
    assert result.error == (
        "cannot render chat/minimal: its user message leaves the placeholder {question} unfilled"
        " (give the input 'question')"
    )


PLACED_HISTORY = """\
name: Seed-style chat
model: {name: test-model}
prompt_templates:
  system: You answer questions about GitLab.
  user: |
    Conversation so far:
    {chat_history}
    Question: {question} (say {{ '{answer}' }})
inputs: {type: object, properties: {question: {type: string}}}
"""

SCRATCHPAD_IN_A_VANILLA_AGENT = """\
name: Misplaced scratchpad
model: {name: test-model}
prompt_templates:
  user: "{agent_scratchpad} {{ question }}"
inputs: {type: object, properties: {question: {type: string}}}
"""


def test_chat_history_is_placed_as_text_where_the_template_says(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"chat/placed.yml": PLACED_HISTORY})
    history = [{"role": "user", "content": "hi {question}"}, {"role": "assistant", "content": "hello"}]
    with executor_for(repo.path, [{"content": "Fine."}, {"content": "Still fine."}]) as executor:
        with_history = executor.run("chat/placed", {"question": "and now?"}, history=history)
        alone = executor.run("chat/placed", {"question": "first?"})
    [sent] = _rounds(with_history)
    assert sent == [
        {"role": "system", "content": "You answer questions about GitLab."},
        {
            "role": "user",
            "content": "Conversation so far:\nUser: hi {question}\nAssistant: hello\nQuestion: and now? (say {answer})",
        },
    ]
    assert _rounds(alone)[0][1]["content"] == "Conversation so far:\n\nQuestion: first? (say {answer})"


def test_the_scratchpad_is_a_react_agents_only(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"chat/misplaced.yml": SCRATCHPAD_IN_A_VANILLA_AGENT})
    with executor_for(repo.path, [{"content": "never sent"}], tools=[PythonTools({})]) as executor:
        result = executor.run("chat/misplaced", {"question": "q"})
    assert (result.outcome, result.llm_calls) == (FAILED, 0)
    assert "{agent_scratchpad} unfilled (the executor fills it for react agents only)" in (result.error or "")


REACT_JSON_SCRATCHPAD = """\
name: JSON steps in a scratchpad
type: react
max_iterations: 3
output_parser: {type: react_json}
model: {name: test-model}
tools:
  - {name: lookup, description: Looks a word up., parameters: {type: object, properties: {word: {type: string}}}}
prompt_templates:
  system: 'Reply as {"thought": "...", "action": {"tool_name": "lookup", "tool_params": []}, "answer": null}.'
  user: |
    {question}
    Steps so far:
    {agent_scratchpad}
inputs: {type: object, properties: {question: {type: string}}}
"""


def test_a_react_json_scratchpad_holds_each_reply_and_its_json_observation(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"chat/json.yml": REACT_JSON_SCRATCHPAD})
    step = (
        '{"thought": "t", "action": {"tool_name": "lookup", "tool_params": [{"name": "word", "value": "ox"}]},'
        ' "answer": null}'
    )
    replies = [{"content": step}, {"content": '{"thought": "done", "action": null, "answer": "a bovine"}'}]
    tools = PythonTools({"lookup": lambda word: f"{word}: a bovine"})
    with executor_for(repo.path, replies, tools=[tools]) as executor:
        result = executor.run("chat/json", {"question": "What is an ox?"})
    assert (result.outcome, result.output) == (COMPLETED, "a bovine")
    first, second = _rounds(result)
    assert first[1]["content"] == "What is an ox?\nSteps so far:\n"
    assert second[1]["content"] == f'What is an ox?\nSteps so far:\n{step}\n{{"observation": "ox: a bovine"}}'
    # The system message's JSON example holds no placeholder, and stays as written.
    assert second[0] == first[0] and "{agent_scratchpad}" not in second[0]["content"]
