"""Runs that advance step by step: a journal of what happened, replayed.

A run is deterministic given what came from outside it: the model's
replies, the tools' results, the retrievers' passages and the user's
decisions on proposed actions. A ``Journal`` records each of those under a
key that names where in the run it happened (``/step 'draft'/chat:1``,
``/vote 3/chat:2/tool:0``), the same on every run of the same agent and
inputs. Advancing a run by one step runs it from the start: what the
journal holds is replayed, and the first model round that it does not hold
is made live, with its tool calls; then the step ends (``StepControl``).
Nothing outside the run is asked twice, and a run survives the process:
the journal is all there is to keep.

A tool call is recorded as started before it runs and as finished after:
one that was started but never finished (the process died) is not run
again on replay, since it may have had effects; the model is told it was
interrupted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Journal(Protocol):
    """Where a run's events are kept, by key. ``record`` must be durable
    when it returns: a step may die right after it."""

    def get(self, key: str) -> Mapping[str, Any] | None:
        """The event recorded under ``key``, or None."""
        ...

    def record(self, key: str, event: Mapping[str, Any]) -> None:
        """Keep ``event`` (JSON-compatible) under ``key``, replacing what was there."""
        ...


@dataclass
class MemoryJournal:
    """A journal in a dict: for tests, and for a process that keeps its
    runs in memory."""

    events: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, key: str) -> Mapping[str, Any] | None:
        return self.events.get(key)

    def record(self, key: str, event: Mapping[str, Any]) -> None:
        self.events[key] = dict(event)


@dataclass(frozen=True)
class PendingAction:
    """A tool call the run proposes and waits for a decision on."""

    key: str
    """Where the decision is recorded: ``<tool call key>:decision``."""
    agent: str
    tool: str
    arguments: dict[str, Any]
    thought: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "agent": self.agent,
            "tool": self.tool,
            "arguments": self.arguments,
            "thought": self.thought,
        }


class StepControl:
    """Ends a step after its first live model round.

    Live work (a model call, a tool call, a retrieval) is counted while it
    runs. A live model call may start while no live call of this step has
    finished; one that would start later waits (parked), and so does a tool
    call that needs a decision nobody has made yet. When nothing live runs
    and something waits, the step is over: ``ended`` is set and the runner
    cancels the run. Branches of a parallel pattern that started their
    model calls together finish them, and their tool calls, in this step.
    """

    def __init__(self) -> None:
        self.ended = asyncio.Event()
        self.rounds = 0
        """Live model calls finished in this step."""
        self.replies: list[str] = []
        """The text of each live reply, in the order they came."""
        self.pending: list[PendingAction] = []
        self._working = 0
        self._parked = 0

    async def begin_model_call(self) -> None:
        """Wait, for ever, if this step has had its live round; else go on."""
        if self.rounds:
            await self._park()
        self._working += 1

    def end_model_call(self, reply: str | None) -> None:
        """``reply``: the text the model gave, None when the call failed."""
        if reply is not None:
            self.rounds += 1
            self.replies.append(reply)
        self.end_work()

    def begin_work(self) -> None:
        self._working += 1

    def end_work(self) -> None:
        self._working -= 1
        self._check()

    async def wait_for_decision(self, action: PendingAction) -> None:
        """Park a tool call until a later step brings its decision."""
        self.pending.append(action)
        await self._park()

    async def _park(self) -> None:
        self._parked += 1
        self._check()
        await asyncio.Event().wait()  # cancelled with the run, at the end of the step

    def _check(self) -> None:
        if self._parked and not self._working:
            self.ended.set()
