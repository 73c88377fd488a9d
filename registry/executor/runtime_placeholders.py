"""The placeholders a leaf's prompt leaves for the executor, and what it
fills them with (``registry.format.spec.RUNTIME_PLACEHOLDERS``).

A render fills the placeholders its inputs name
(``registry.rendering.placeholders``); the executor fills the rest from its
own variables: ``{chat_history}``, the prior turns of a conversation as
text, and, for a ReAct agent, ``{agent_scratchpad}``, its thoughts, actions
and observations so far, rendered again every round. A placeholder nothing
fills stops the run before its first call (``unfilled`` says why).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from registry.format.spec import RUNTIME_PLACEHOLDERS
from registry.models import Placeholder, Prompt
from registry.rendering import fill_placeholders


@dataclass(frozen=True)
class PlacedPrompt:
    """A leaf's rendered prompt and the executor's values for the
    placeholders its inputs left, kept to render the messages again when a
    value changes (a ReAct agent's scratchpad, every round)."""

    prompt: Prompt
    values: Mapping[str, str]
    history: tuple[dict[str, Any], ...]
    """Prior turns to put after the system messages (none when the template places them)."""

    def messages(self, **changed: str) -> list[dict[str, Any]]:
        """The chat messages, with ``values`` (updated by ``changed``) filled in."""
        filled = fill_placeholders(self.prompt, {**self.values, **changed})
        messages: list[dict[str, Any]] = [message.as_dict() for message in filled.messages]
        if self.history:
            leading = 0
            while leading < len(messages) and messages[leading]["role"] == "system":
                leading += 1
            messages[leading:leading] = [dict(turn) for turn in self.history]
        return messages


def unfilled(agent: str, prompt: Prompt, placeholder: Placeholder) -> str:
    """Why a run stops before its first call: a placeholder nothing fills."""
    role = prompt.messages[placeholder.message].role
    kinds = RUNTIME_PLACEHOLDERS.get(placeholder.name)
    if kinds is not None:
        why = f"the executor fills it for {', '.join(kinds)} agents only"
    else:
        why = f"give the input {placeholder.name!r}"
    return f"cannot render {agent}: its {role} message leaves the placeholder {{{placeholder.name}}} unfilled ({why})"


def history_text(history: Sequence[Mapping[str, Any]]) -> str:
    """Prior turns as ``{chat_history}`` takes them: ``Role: text``, one turn
    after another (empty when there are none)."""
    return "\n".join(f"{str(turn.get('role') or '').capitalize()}: {turn.get('content') or ''}" for turn in history)


# A ReAct step's first line, when it starts with one of the format's markers.
_STEP_MARKER = re.compile(r"\s*(Thought|Action|Action Input|Final Answer|Observation)\s*:", re.IGNORECASE)


def scratchpad_step(parser_type: str | None, reply: str, observation: str) -> str:
    """One step of ``{agent_scratchpad}``: the model's reply, then the
    ``observation`` sent back for it (as the parser's format writes one)."""
    text = reply.strip()
    if parser_type == "react_text" and not _STEP_MARKER.match(text):
        # The seed's template ends the scratchpad's message with "Thought:",
        # so a reply may be the rest of a thought: the step says whose.
        text = f"Thought: {text}"
    return f"{text}\n{observation}"
