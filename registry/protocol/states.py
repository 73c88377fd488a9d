"""The state machines of the Agent Protocol's entities, and who may move them.

One table, ``TRANSITIONS``, is the whole of it: for Task, Step, Action and
Artifact, every state change, the party that causes it (the **user** decides,
the **client** sends requests for the user, the **server** runs the agent)
and the endpoint through which it happens. The service asks ``transition``
before it changes anything, and a change that is not in the table is
refused with 409 (``InvalidState``, naming the current state).
docs/agent-protocol.md shows the same table; a test keeps the two equal and
walks every transition, allowed and refused.

Every task runs on DBOS workers (``registry.runs``). A **stepped** task is
``created`` and runs one step each time a client posts one; a
**background** task (``additional_input.mode: background``, and every A2A
task) runs on its own to its end or to its next approval. Either way a
request that runs something makes the task ``queued`` (a worker will take
it), a worker makes it ``running``, and the step's end leaves it
``waiting_for_input`` (a stepped task between steps; any task whose run
proposes an action awaiting the user's decision) or over: ``completed``
(the run completed, or a gate blocked it: an answer either way) or
``failed`` (failed, or exhausted a limit). A stepped step whose model call
fails (an outage, a timeout) fails alone: the task waits again, and the
next step makes the call again; a background task tries the call again
itself, three times, then fails. A user may cancel a task that is not
over; a running one stops at its next step, and the step running when the
cancel came keeps nothing it produced (no answer, file or action: the
task's row decides, in the transaction that ends the step, which of the
two came first). A worker that dies mid-step
changes no state: another worker takes the step over and goes on from what
it recorded. Steps and artifacts never change once written.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.errors import InvalidState

USER = "user"
CLIENT = "client"
SERVER = "server"
NEW = "(new)"
"""The source state of a transition that creates the entity."""

TASK_STATES = ("created", "queued", "running", "waiting_for_input", "completed", "failed", "cancelled")
TASK_FINISHED = frozenset({"completed", "failed", "cancelled"})
STEP_STATES = ("created", "running", "completed", "failed")
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

_WORKER = "(a worker)"
_DECIDE = "POST /ap/v1/agent/tasks/{task_id}/steps, or an A2A message"

TRANSITIONS: tuple[Transition, ...] = (
    # Task
    Transition("task", NEW, "create", "created", CLIENT, "POST /ap/v1/agent/tasks",
               "a stepped task: the agent and release are resolved and pinned, the inputs checked; nothing runs yet"),
    Transition("task", NEW, "submit", "queued", CLIENT, "POST /ap/v1/agent/tasks, or an A2A message",
               "a background task: resolved, pinned and checked as a stepped one, and queued for a worker at once"),
    Transition("task", "created", "step", "queued", CLIENT, _STEPS, "a stepped task's first step is queued"),
    Transition("task", "waiting_for_input", "step", "queued", CLIENT, _STEPS,
               "a stepped task's next step is queued, with the user's decision when an action is pending"),
    Transition("task", "waiting_for_input", "decide", "queued", USER, _DECIDE,
               "a background task's pending action is decided: the run goes on"),
    Transition("task", "queued", "start", "running", SERVER, _WORKER, "a worker takes the task's next step"),
    Transition("task", "running", "pause", "waiting_for_input", SERVER, _WORKER,
               "the step ends and the run is not over: a stepped task waits for its next step; any task whose"
               " step proposed an action waits for the decision"),
    Transition("task", "running", "complete", "completed", SERVER, _WORKER,
               "the run ends with an answer: outcome completed, or blocked by a gate"),
    Transition("task", "running", "fail", "failed", SERVER, _WORKER,
               "the run ends without one: outcome failed, or exhausted a limit; or a background task's model call"
               " failed for good (a 4xx, say) or three more times"),
    Transition("task", "running", "interrupt", "waiting_for_input", SERVER, _WORKER,
               "a stepped task's step fails and the run is not over (a model call failed, or the pinned agent could"
               " not be fetched): the next step tries again from the journal"),
    Transition("task", "created", "cancel", "cancelled", USER, _CANCEL, "the user gives the task up"),
    Transition("task", "queued", "cancel", "cancelled", USER, _CANCEL,
               "the user gives the task up before a worker takes it"),
    Transition("task", "running", "cancel", "cancelled", USER, _CANCEL,
               "the user gives the task up: the running step ends without an answer, files or an action, and no"
               " other starts"),
    Transition("task", "waiting_for_input", "cancel", "cancelled", USER, _CANCEL,
               "the user gives the task up; a pending action is left undecided"),
    # Step
    Transition("step", NEW, "create", "created", CLIENT, _STEPS,
               "a stepped task's step, with the request's input; a worker will run it"),
    Transition("step", NEW, "start", "running", SERVER, _WORKER,
               "a background task's next step, created running by the worker that runs it"),
    Transition("step", "created", "start", "running", SERVER, _WORKER, "a worker runs it"),
    Transition("step", "running", "finish", "completed", SERVER, _WORKER,
               "its output, is_last and additional_output are written once and never change; a worker that dies"
               " before this hands the step to another, which goes on from what it recorded"),
    Transition("step", "running", "fail", "failed", SERVER, _WORKER,
               "a model call failed (an outage, a timeout, a refused connection), or the pinned agent could not"
               " be fetched: its error says why; nothing the call did not answer is journaled. A step whose task was"
               " cancelled while it ran fails too, and keeps nothing it produced"),
    # Action
    Transition("action", NEW, "propose", "pending", SERVER, _WORKER,
               "the model calls a tool that needs approval; the step ends with the action"),
    Transition("action", "pending", "approve", "approved", USER, _DECIDE,
               "the decision is approve: the tool runs as proposed"),
    Transition("action", "pending", "reject", "rejected", USER, _DECIDE,
               "decision reject: the tool does not run; the reason goes to the model as the observation"),
    Transition("action", "pending", "edit", "edited", USER, _DECIDE,
               "decision edit: the tool runs with the user's arguments, checked against its schema"),
    # Artifact
    Transition("artifact", NEW, "upload", "stored", CLIENT, _UPLOAD,
               "a file the user gives the task (agent_created false)"),
    Transition("artifact", NEW, "produce", "stored", SERVER, _WORKER,
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
