"""What a step answers: the members of its ``additional_output``, the
action it proposes, and whether its run stopped on a failed model call.

A run that stops because a model call failed (an outage, a timeout, a
refused connection) is not over: the executor journals nothing for a call
that got no answer, so the next step makes that call again and replays
everything before it. The service fails only the step, and the task can go
on (``interrupt`` in the state table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.executor import EXHAUSTED, FAILED, Trace
from registry.executor.executor import StepResult
from registry.executor.journal import PendingAction
from registry.protocol.records import ActionRecord, TaskRecord


def pending_action(action: ActionRecord) -> PendingAction:
    return PendingAction(action.key, action.agent, action.tool, action.arguments, action.thought)


def action_json(action: ActionRecord) -> dict[str, Any]:
    return {
        "action_id": action.action_id,
        "status": action.status,
        "agent": action.agent,
        "tool": action.tool,
        "arguments": action.arguments,
        "thought": action.thought,
    }


def step_output(task: TaskRecord, trace: Trace) -> dict[str, Any]:
    """What every step answers in ``additional_output``: the agent and
    release, the model calls this step made and their usage, the trace so far."""
    # The model calls this step made (not replayed), as the executor counts
    # them: each call made, answered or failed, against the budget, and the
    # answered ones apart. A call the step ended on, parked for the next
    # step, was not made.
    made = [
        s
        for s in trace.spans("chat")
        if not s.attributes.get("registry.replayed") and ("registry.reply" in s.attributes or s.status == "error")
    ]
    live = [s for s in made if "registry.reply" in s.attributes]
    return {
        "agent": task.agent,
        "release": {"tag": task.release_tag, "commit": task.release_commit},
        "llm_calls": len(made),
        "llm_replies": len(live),
        "usage": {
            "input_tokens": sum(s.attributes.get("gen_ai.usage.input_tokens") or 0 for s in live),
            "output_tokens": sum(s.attributes.get("gen_ai.usage.output_tokens") or 0 for s in live),
        },
        "trace": trace.as_dict(),
    }


@dataclass(frozen=True)
class FailedCall:
    """A model call that got no answer: why (the run's error), and whether
    the same call may well succeed later (``ModelError.transient``; a call
    cut short by the step's time limit may)."""

    error: str
    transient: bool


def failed_model_call(result: StepResult) -> FailedCall | None:
    """The call the run ended on, when it ended because a model call did not
    answer: an outage, a refused connection, a timeout, an error status, or
    the step's time limit (the service's ``--timeout``, a composite's
    ``limits.timeout``) reached while it waited. Such a call's span has no
    reply (the executor opens it only once the budget and the clock allow
    the call), and nothing was journaled for it, so the next step makes it
    again. None otherwise."""
    run = result.result
    if run is None or run.outcome not in (FAILED, EXHAUSTED):
        return None
    for span in run.trace.spans("chat"):
        if "registry.reply" not in span.attributes and not span.attributes.get("registry.replayed"):
            transient = span.attributes.get("registry.error.transient", True) is not False
            return FailedCall(run.error or "a model call failed", transient)
    return None
