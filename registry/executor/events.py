"""What a streamed run yields (``Executor.astream``): typed events, in the
order things happen, the ``OutcomeEvent`` last.

- ``TextEvent``: a piece of the run's answer. Only the part of the run whose
  text is the answer streams text, and only once it is sure to be (see
  docs/executor.md, "Streaming"): the pieces of a completed run, joined, are
  its ``output``.
- ``ToolCallEvent`` and ``ToolResultEvent``: a tool call as it starts and as
  it ends; ``ActionEvent`` instead of a result when the call waits for a
  person's approval, which a run cannot ask for (it then ends ``blocked``).
- ``ParseEvent``: a reply read by its agent's output parser.
- ``GateEvent``: a response gate's decision.
- ``SpanEvent``: a span of the trace, ended (every span, the run's last).
- ``OutcomeEvent``: the ``RunResult``, as ``Executor.arun`` returns it.

Every event but the text comes from the trace as it grows, from every part
of the run (the branches of a vote included), so that a reader can show
progress; each names its ``agent`` and its span (``span_id``, unique in
the process; ``parent_id`` links a span to the one it is in). ``as_dict``
gives a JSON object with a ``type`` (``prompt-registry run --stream
--format jsonl`` prints one per line).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from registry.executor.trace import Span

if TYPE_CHECKING:
    from registry.executor.executor import RunResult


@dataclass(frozen=True)
class _FieldsEvent:
    """An event whose JSON object is its ``type``, then each of its fields,
    in the order the class declares them."""

    type: ClassVar[str]

    def as_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it copies every value, a tool's arguments
        # and a parser's result included, where the values themselves will do.
        return {"type": self.type, **{field.name: getattr(self, field.name) for field in fields(self)}}


@dataclass(frozen=True)
class TextEvent(_FieldsEvent):
    """A piece of the answer's text, as it arrives."""

    type: ClassVar[str] = "text"
    text: str
    agent: str
    """The agent whose reply (or decided output) it is."""
    span_id: int
    """Its model call's span, or, for text released whole, the span of the agent that decided it."""
    path: str
    """Where in the run: ``""`` for the run's own agent, ``/step 'draft'``, ``/route 'billing'``..."""


@dataclass(frozen=True)
class ToolCallEvent(_FieldsEvent):
    """A tool call, as it starts."""

    type: ClassVar[str] = "tool_call"
    agent: str
    tool: str
    arguments: Any
    call_id: str | None
    """The model's id for a native call; None for a ReAct action."""
    span_id: int


@dataclass(frozen=True)
class ToolResultEvent(_FieldsEvent):
    """A tool call's result, as the model is given it."""

    type: ClassVar[str] = "tool_result"
    agent: str
    tool: str
    status: str
    """``ok``, ``error``, ``timeout``, ``rejected``... (``ToolResult.status``)."""
    output: str
    span_id: int


@dataclass(frozen=True)
class ActionEvent(_FieldsEvent):
    """A tool call that needs a person's approval before it is made."""

    type: ClassVar[str] = "action"
    agent: str
    tool: str
    arguments: Any
    span_id: int


@dataclass(frozen=True)
class ParseEvent(_FieldsEvent):
    """A reply read by its agent's output parser."""

    type: ClassVar[str] = "parse"
    agent: str
    kind: str
    """``final_answer``, ``tool_call`` or ``parse_error``."""
    result: dict[str, Any]
    """The parser's result (``ParseResult.as_dict``)."""
    span_id: int


@dataclass(frozen=True)
class GateEvent(_FieldsEvent):
    """A response gate's decision in a chain."""

    type: ClassVar[str] = "gate"
    agent: str
    """The chain."""
    step: str
    """The id of the gate's step."""
    allow: bool
    reason: str
    span_id: int


@dataclass(frozen=True)
class SpanEvent(_FieldsEvent):
    """A span of the trace, ended."""

    type: ClassVar[str] = "span"
    name: str
    kind: str
    """The span's operation: ``run``, ``invoke_agent``, ``chat``, ``execute_tool``, ``gate``..."""
    status: str
    error: str | None
    agent: str
    span_id: int
    parent_id: int | None
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "seconds": round(self.seconds, 6)}


@dataclass(frozen=True)
class OutcomeEvent:
    """How the run ended: the last event."""

    type: ClassVar[str] = "outcome"
    result: RunResult

    def as_dict(self) -> dict[str, Any]:
        """The result as ``RunResult.as_dict`` gives it, without the trace,
        whose spans the stream has already given one by one."""
        out = {"type": self.type, **self.result.as_dict()}
        del out["trace"]
        return out


Event = TextEvent | ToolCallEvent | ToolResultEvent | ActionEvent | ParseEvent | GateEvent | SpanEvent | OutcomeEvent
"""What ``Executor.astream`` yields."""


def started(span: Span, agent: str) -> list[Event]:
    """The events of a span of ``agent`` as it opens: a tool call's start."""
    if span.operation != "execute_tool":
        return []
    a = span.attributes
    return [
        ToolCallEvent(
            agent,
            str(a.get("gen_ai.tool.name")),
            a.get("registry.tool.arguments"),
            a.get("gen_ai.tool.call.id"),
            span.span_id,
        )
    ]


def ended(span: Span, agent: str, parent_id: int | None) -> list[Event]:
    """The events of a span of ``agent`` as it ends: what it decided, then the span."""
    a = span.attributes
    found: list[Event] = []
    if span.operation == "execute_tool":
        tool = str(a.get("gen_ai.tool.name"))
        status = a.get("registry.tool.status")
        if status == "needs_approval":
            found.append(ActionEvent(agent, tool, a.get("registry.tool.arguments"), span.span_id))
        elif status is not None:
            found.append(
                ToolResultEvent(agent, tool, str(status), str(a.get("registry.tool.output", "")), span.span_id)
            )
    elif span.operation == "parse":
        result = a.get("registry.parse.result")
        if isinstance(result, dict):
            found.append(ParseEvent(agent, str(result.get("kind")), result, span.span_id))
    elif span.operation == "gate":
        allow = a.get("registry.decision") == "allow"
        step = span.name.removeprefix("gate ")
        found.append(GateEvent(agent, step, allow, str(a.get("registry.gate.reason", "")), span.span_id))
    found.append(
        SpanEvent(span.name, span.operation, span.status, span.error, agent, span.span_id, parent_id, span.seconds)
    )
    return found
