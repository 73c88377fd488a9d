"""What every part of a run shares: its context, budget, outcomes and the
output of one agent.

A run ends in one of four outcomes. Inside the runtime the three that stop
it early are exceptions (``Blocked``, ``Exhausted``, ``Failed``, all
``RunStopped``), raised where the reason is known and turned into the run's
result at the top (``registry.executor.executor``); nothing else escapes a run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from registry.client import Agent
from registry.errors import RenderError
from registry.executor.journal import Journal, StepControl
from registry.executor.tools import ToolBox
from registry.models import Resolution
from registry.providers.chat import ChatModel, Usage
from registry.rendering import CompiledValue, RenderLimits, TemplateCompileError, TemplateEnvironment

if TYPE_CHECKING:
    from registry.executor.retrieval import Retriever
    from registry.executor.streaming import AnswerText

COMPLETED = "completed"
BLOCKED = "blocked"
EXHAUSTED = "exhausted"
FAILED = "failed"
OUTCOMES = (COMPLETED, BLOCKED, EXHAUSTED, FAILED)

RENDER_LIMITS = RenderLimits()
"""Step inputs render under the registry's own limits, as prompts do."""


class RunStopped(Exception):
    """The run ends here with ``outcome``; ``output`` is what it answers, if anything."""

    outcome = FAILED
    reason: str | None = None
    """Set on the root span as ``registry.error.reason`` when the run ends so."""

    def __init__(self, message: str, *, output: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.output = output


class Blocked(RunStopped):
    """A response gate said no; ``output`` is its ``on_block`` text."""

    outcome = BLOCKED


class Exhausted(RunStopped):
    """An iteration limit, the model-call budget, or the time limit ran out."""

    outcome = EXHAUSTED


class Failed(RunStopped):
    """A model, tool, input or definition error."""

    outcome = FAILED


class NotBound(Failed):
    """The run could not start: a tool, retriever or model its agents need
    is bound to nothing, or one of its agents is invalid. No model was asked;
    the run says nothing of how the agent answers (an evaluation counts it
    an error, not a failure)."""

    reason = "not-bound"


@dataclass
class Budget:
    """The model calls a run (or a nested composite) may still make."""

    limit: int
    owner: str
    parent: Budget | None = None
    used: int = 0

    def has_room(self) -> bool:
        """Whether one more model call fits this budget and every one above it."""
        budget: Budget | None = self
        while budget is not None:
            if budget.used >= budget.limit:
                return False
            budget = budget.parent
        return True

    def spend(self) -> None:
        """Count one model call against this budget and every one above it."""
        budget: Budget | None = self
        while budget is not None:
            if budget.used >= budget.limit:
                raise Exhausted(
                    f"{budget.owner} reached its limit of {budget.limit} model calls (limits.max_llm_calls)"
                )
            budget = budget.parent
        budget = self
        while budget is not None:
            budget.used += 1
            budget = budget.parent


@dataclass
class Totals:
    """Counted over the whole run, nested agents included."""

    llm_calls: int = 0
    """Model calls made, answered or not: what ``limits.max_llm_calls`` counts."""
    llm_replies: int = 0
    """Model calls that got a reply."""
    input_tokens: int = 0
    output_tokens: int = 0
    reported: bool = False
    warnings: list[str] = field(default_factory=list)
    """What went wrong without stopping the run, for its result to say."""

    def replied(self, usage: Usage | None) -> None:
        self.llm_replies += 1
        if usage is not None:
            if usage.input_tokens is not None:
                self.input_tokens += usage.input_tokens
                self.reported = True
            if usage.output_tokens is not None:
                self.output_tokens += usage.output_tokens
                self.reported = True

    def usage(self) -> Usage:
        if not self.reported:
            return Usage()
        return Usage(self.input_tokens, self.output_tokens)


@dataclass(frozen=True)
class ModelNames:
    """Which model name a request carries: the definition's ``model.name``,
    unless the operator maps it (``mapping``) or overrides every one."""

    override: str | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)
    fallback: str | None = None
    """For a definition that names no model: the scripted model needs none."""

    def resolve(self, name: str | None, agent: str) -> str:
        if self.override:
            return self.override
        if name is None:
            if self.fallback is not None:
                return self.fallback
            raise Failed(f"{agent} names no model (model.name): give one with --model-name")
        return self.mapping.get(name, name)


@dataclass(frozen=True)
class AgentOutput:
    """What one agent gave: its reply text and, with a ``json`` parser (or a
    ReAct answer that is JSON), the parsed value."""

    text: str
    data: Any = None
    parse_error: str | None = None
    """Why the reply did not parse, for an agent whose parser can refuse it."""
    parse_reason: str | None = None
    """The parser's id for it: ``invalid_json``, ``schema_mismatch``..."""

    def require_data(self, agent: str, purpose: str) -> Any:
        if self.parse_error is not None:
            raise Failed(f"{purpose}: the reply of {agent} does not parse: {self.parse_error}")
        return self.data


@dataclass(frozen=True)
class RunContext:
    """Everything a node of the run needs, passed down; ``budget`` and
    ``deadline`` narrow as nested composites add limits of their own."""

    model: ChatModel
    tools: ToolBox
    retrievers: Mapping[str, Retriever]
    names: ModelNames
    agents: Mapping[str, Agent]
    """Every agent the run may reach, by ``usecase/name``, at the run's release."""
    release: Resolution
    budget: Budget
    totals: Totals
    values: ValueCache
    deadline: float | None = None
    """``time.monotonic()`` when the run must end, if it has a limit."""
    path: str = ""
    """Where in the run this is: ``/step 'draft'/vote 2``; a journal's keys start with it."""
    journal: Journal | None = None
    """What earlier steps recorded, replayed rather than asked again (step by step runs)."""
    control: StepControl | None = None
    approvals: frozenset[str] = frozenset()
    """Tools that wait for a decision before they run (step by step runs)."""
    answer: AnswerText | None = None
    """Where the text of this part of a streamed run goes, when it may be the
    run's answer (``registry.executor.streaming``); None: it streams none."""

    def at(self, segment: str) -> RunContext:
        """The context of a call made at ``segment`` below this one."""
        return replace(self, path=f"{self.path}/{segment}")

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def check_time(self) -> None:
        left = self.remaining()
        if left is not None and left <= 0:
            raise Exhausted("the run reached its time limit (limits.timeout)")

    def narrowed(self, *, budget: Budget, timeout: float | None) -> RunContext:
        deadline = self.deadline
        if timeout is not None:
            ends = time.monotonic() + timeout
            deadline = ends if deadline is None else min(deadline, ends)
        return replace(self, budget=budget, deadline=deadline)

    def agent(self, reference: str) -> Agent:
        found = self.agents.get(reference)
        if found is None:
            raise Failed(f"{reference} is not among the agents of the release this run is pinned to")
        return found


class ValueCache:
    """Step input templates, compiled once per run (a map pattern renders the
    same ones for every chunk)."""

    def __init__(self) -> None:
        self._environment: TemplateEnvironment | None = None
        self._compiled: dict[str, CompiledValue] = {}

    def evaluate(self, source: str, variables: Mapping[str, Any], *, what: str) -> Any:
        compiled = self._compiled.get(source)
        if compiled is None:
            if self._environment is None:  # a leaf's run renders no step inputs: none needed
                self._environment = TemplateEnvironment(lambda name: None)
            try:
                compiled = CompiledValue(self._environment, source, name=what)
            except TemplateCompileError as exc:
                raise Failed(f"{what}: {exc.problem.message}") from exc
            self._compiled[source] = compiled
        try:
            return compiled.evaluate(variables, limits=RENDER_LIMITS, what=what)
        except RenderError as exc:
            raise Failed(exc.detail) from exc


def reference(agent: Agent) -> str:
    return f"{agent.usecase}/{agent.name}"
