"""The state machines of the Agent Protocol's entities, and who may move them.

One table, ``TRANSITIONS``, is the whole of it: for Task, Step, Action and
Artifact, every state change, the party that causes it (the **user** decides,
the **client** sends requests for the user, the **server** runs the agent)
and the endpoint through which it happens. The service asks ``transition``
before it changes anything, and a change that is not in the table is
refused with 409 (``InvalidState``, naming the current state).
docs/agent-protocol.md shows the same table; a test keeps the two equal and
walks every transition, allowed and refused.

A task is ``created`` with its agent and release pinned; each step runs it
one model round further (``running``), then leaves it ``waiting_for_input``
(the next step, or a decision on a proposed action) until the run is over:
``completed`` (the run completed, or a gate blocked it: an answer either
way) or ``failed`` (failed, or exhausted a limit). A step whose model call
fails (an outage, a timeout) fails alone: the task waits again, and the
next step makes the call again. A user may cancel a task that is not
running. Steps and artifacts never change once written.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidState

USER = "user"
CLIENT = "client"
SERVER = "server"
NEW = "(new)"
"""The source state of a transition that creates the entity."""

TASK_STATES = ("created", "running", "waiting_for_input", "completed", "failed", "cancelled")
TASK_FINISHED = frozenset({"completed", "failed", "cancelled"})
STEP_STATES = ("running", "completed", "failed")
ACTION_STATES = ("pending", "approved", "rejected", "edited")
ARTIFACT_STATES = ("stored",)


@dataclass(frozen=True)
class Transition:
    entity: str
    source: str
    event: str
    """What happens, in a word the service asks with: ``create``, ``step``, ``finish``..."""
    target: str
    party: str
    endpoint: str
    description: str


_STEPS = "POST /ap/v1/agent/tasks/{task_id}/steps"
_CANCEL = "POST /ap/v1/agent/tasks/{task_id}/cancel"
_UPLOAD = "POST /ap/v1/agent/tasks/{task_id}/artifacts"

TRANSITIONS: tuple[Transition, ...] = (
    # Task
    Transition("task", NEW, "create", "created", CLIENT, "POST /ap/v1/agent/tasks",
               "the agent and release are resolved and pinned, the inputs checked; nothing runs yet"),
    Transition("task", "created", "step", "running", CLIENT, _STEPS, "the first step starts"),
    Transition("task", "waiting_for_input", "step", "running", CLIENT, _STEPS,
               "the next step starts, with the user's decision when an action is pending"),
    Transition("task", "running", "pause", "waiting_for_input", SERVER, _STEPS,
               "the step ends and the run is not over (it may propose an action)"),
    Transition("task", "running", "complete", "completed", SERVER, _STEPS,
               "the run ends with an answer: outcome completed, or blocked by a gate"),
    Transition("task", "running", "fail", "failed", SERVER, _STEPS,
               "the run ends without one: outcome failed, or exhausted a limit"),
    Transition("task", "running", "interrupt", "waiting_for_input", SERVER, _STEPS,
               "the step fails and the run is not over (a model call failed, or the pinned agent could not be"
               " fetched): the next step tries again from the journal"),
    Transition("task", "running", "recover", "waiting_for_input", SERVER, "(a runner gone)",
               "the process running the step is gone: the step is marked failed and the task can go on"),
    Transition("task", "created", "cancel", "cancelled", USER, _CANCEL, "the user gives the task up"),
    Transition("task", "waiting_for_input", "cancel", "cancelled", USER, _CANCEL,
               "the user gives the task up; a pending action is left undecided"),
    # Step
    Transition("step", NEW, "create", "running", CLIENT, _STEPS,
               "created running: the step runs within the request (the protocol's created state is never seen)"),
    Transition("step", "running", "finish", "completed", SERVER, _STEPS,
               "its output, is_last and additional_output are written once and never change"),
    Transition("step", "running", "fail", "failed", SERVER, _STEPS,
               "a model call failed (an outage, a timeout, a refused connection), or the pinned agent could not"
               " be fetched: its error says why; nothing the call did not answer is journaled"),
    Transition("step", "running", "recover", "failed", SERVER, "(a runner gone)",
               "its process is gone; a tool call it had started is not made again"),
    # Action
    Transition("action", NEW, "propose", "pending", SERVER, _STEPS,
               "the model calls a tool that needs approval; the step ends with the action"),
    Transition("action", "pending", "approve", "approved", USER, _STEPS,
               "the next step's additional_input.decision is approve: the tool runs as proposed"),
    Transition("action", "pending", "reject", "rejected", USER, _STEPS,
               "decision reject: the tool does not run; the reason goes to the model as the observation"),
    Transition("action", "pending", "edit", "edited", USER, _STEPS,
               "decision edit: the tool runs with the user's arguments, checked against its schema"),
    # Artifact
    Transition("artifact", NEW, "upload", "stored", CLIENT, _UPLOAD,
               "a file the user gives the task (agent_created false)"),
    Transition("artifact", NEW, "produce", "stored", SERVER, _STEPS,
               "the run's final answer, or a tool's output that is a file, written by its step (agent_created true)"),
)  # fmt: skip

_BY_EVENT = {(t.entity, t.source, t.event): t for t in TRANSITIONS}


def transition(entity: str, state: str, event: str, *, detail: str | None = None) -> Transition:
    """The transition ``event`` makes from ``state``; ``InvalidState`` (409) when there is none."""
    found = _BY_EVENT.get((entity, state, event))
    if found is None:
        allowed = sorted({t.event for t in TRANSITIONS if t.entity == entity and t.source == state})
        raise InvalidState(
            detail or f"the {entity} is {state}: it cannot {event} (see the state table of docs/agent-protocol.md)",
            entity=entity,
            state=state,
            allowed=allowed,
        )
    return found
