"""The seed's chat/minimal run as a ReAct agent: scripted replies, tools that
answer from memory, and the scratchpad the executor should build from them."""

from __future__ import annotations

from typing import Any

from registry.executor import PythonTools

_STEPS = [
    (
        # The first reply continues the prefilled "Thought:", as a model completing the assistant message does.
        'I need to read the issue first.\nAction: issue_reader\nAction Input: {"reference": "gitlab-org/gitlab#12"}',
        "Thought: I need to read the issue first.",
        "gitlab-org/gitlab#12: main breaks when two merge requests merge at once",
    ),
    (
        "Thought: the docs will say what merge trains change.\n"
        'Action: gitlab_documentation\nAction Input: {"query": "merge trains"}',
        "Thought: the docs will say what merge trains change.",
        "merge trains: each merge request's pipeline runs on the result of the ones ahead of it",
    ),
]
SEED_ANSWER = "Yes: merge trains test each merge request on top of the ones ahead of it."

SEED_REPLIES: list[dict[str, Any]] = [
    *({"content": reply} for reply, _, _ in _STEPS),
    {"content": f"Thought: that settles it.\nFinal Answer: {SEED_ANSWER}"},
]

SEED_TOOLS = PythonTools(
    {
        "issue_reader": lambda reference: f"{reference}: main breaks when two merge requests merge at once",
        "gitlab_documentation": lambda query: (
            f"{query}: each merge request's pipeline runs on the result of the ones ahead of it"
        ),
    }
)


def scratchpad_after(steps: int) -> str:
    """``{agent_scratchpad}`` once ``steps`` tools have answered: each step
    its thought (said to be one), its action and its observation."""
    written = []
    for reply, thought, observation in _STEPS[:steps]:
        action = reply.split("\n", 1)[1]
        written.append(f"{thought}\n{action}\nObservation: {observation}")
    return "\n".join(written)
