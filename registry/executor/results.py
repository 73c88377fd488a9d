"""What a run returns (``RunResult``), and what one step of a run step by
step returns (``StepResult``): plain frozen values, apart from the
``Executor`` that makes them so that a reader of results needs nothing of
the runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.executor.journal import PendingAction
from registry.executor.runtime import COMPLETED
from registry.executor.trace import Trace
from registry.models import Resolution
from registry.providers.chat import Usage


@dataclass(frozen=True)
class StepResult:
    """One step of a run: what it produced, and whether the run is over."""

    is_last: bool
    output: str | None
    """The run's answer when it is over; else this step's last model reply."""
    action: PendingAction | None
    """A tool call that waits for a decision, when the step ended for one."""
    replies: tuple[str, ...]
    """The text of each model reply made live in this step."""
    result: RunResult | None = None
    """The run's result, when this step ended it."""
    trace: Trace | None = None
    """The run so far (replayed spans marked ``registry.replayed``), when it is not over."""

    @property
    def run_trace(self) -> Trace:
        trace = self.result.trace if self.result is not None else self.trace
        assert trace is not None
        return trace


@dataclass(frozen=True)
class RunResult:
    """How a run ended, what it answered, and what it did."""

    outcome: str
    """``completed``, ``blocked`` (a gate said no, or a run that is not step
    by step reached a tool call that needs approval), ``exhausted`` (an
    iteration, model-call or time limit) or ``failed`` (a model, tool, input
    or definition error)."""
    output: str | None
    """The answer: the final text; for ``blocked``, the gate's ``on_block`` text (none for a tool call)."""
    data: Any
    """The parsed answer, when the agent's parser gives one (``json``)."""
    error: str | None
    """Why the run did not complete, in one line."""
    agent: str
    release: Resolution
    digest: str
    llm_calls: int
    """Model calls made, answered or not (what ``limits.max_llm_calls``
    counts; one retried on 429 or 5xx counts once)."""
    llm_replies: int
    """Model calls that got a reply: fewer than ``llm_calls`` when one failed
    or the run stopped while it waited."""
    usage: Usage
    seconds: float
    trace: Trace
    warnings: tuple[str, ...] = ()
    """What went wrong without stopping the run: branch replies that did not
    pass their parser, a model map that matched no model (with
    ``warn_unused_model_map``). Also logged, once per executor, on the
    ``registry.executor`` logger."""

    @property
    def completed(self) -> bool:
        return self.outcome == COMPLETED

    @property
    def tag(self) -> str:
        """The release tag the run was pinned to (``release.release.tag``)."""
        return self.release.release.tag

    @property
    def commit(self) -> str:
        """The commit of that release (``release.release.commit``)."""
        return self.release.release.commit

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "output": self.output,
            "data": self.data,
            "error": self.error,
            "agent": self.agent,
            "release": {"tag": self.tag, "commit": self.commit, "requested": self.release.requested},
            "digest": self.digest,
            "llm_calls": self.llm_calls,
            "llm_replies": self.llm_replies,
            "usage": self.usage.as_dict(),
            "seconds": round(self.seconds, 6),
            "warnings": list(self.warnings),
            "trace": self.trace.as_dict(),
        }
