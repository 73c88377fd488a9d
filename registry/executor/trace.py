"""Traces: what a run did, as a tree of spans.

Every run yields a ``Trace``: one span per agent run (``invoke_agent``),
model call (``chat``), tool call (``execute_tool``), retrieval
(``retrieve``), parse of a reply (``parse``), and pattern decision (``gate``,
``route``, ``evaluate``, ``aggregate``). Names and attributes follow the
OpenTelemetry GenAI semantic conventions where they have one
(``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``, ``gen_ai.tool.name``, ...); the rest are ours,
under ``registry.``. A trace is plain data: JSON with ``as_dict``, a tree for
terminals with ``as_text``, and OpenTelemetry spans with
``registry.executor.otel.emit`` when that optional dependency is installed.

A model call's span keeps the messages added since the previous call of the
same agent run (the first call: all of them), so that a long loop's trace
grows with what happened, not with its square; the whole conversation is
those pieces in order.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from registry.models import shorten

_ids = itertools.count(1)


@dataclass
class Span:
    """One operation of a run, with what it was given and what it gave."""

    name: str
    operation: str
    attributes: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    ended: float | None = None
    status: str = "ok"
    """``ok``, or ``error`` with ``error`` saying what went wrong."""
    error: str | None = None
    children: list[Span] = field(default_factory=list)
    span_id: int = field(default_factory=lambda: next(_ids))

    def child(self, name: str, operation: str, **attributes: Any) -> Span:
        span = Span(name, operation, dict(attributes))
        self.children.append(span)
        return span

    @contextmanager
    def open(self, name: str, operation: str, **attributes: Any) -> Iterator[Span]:
        """A child span, ended when the block ends (an error status if it raised)."""
        span = self.child(name, operation, **attributes)
        try:
            yield span
        except asyncio.CancelledError:
            # A step by step run stops here, to go on in the next step.
            span.set(**{"registry.step_ended_here": True})
            raise
        except BaseException as exc:
            if span.status == "ok":
                span.fail(_describe(exc))
            raise
        finally:
            span.end()

    def set(self, **attributes: Any) -> None:
        self.attributes.update(attributes)

    def fail(self, error: str, *, reason: str | None = None) -> None:
        self.status = "error"
        self.error = error
        if reason is not None:
            self.attributes["registry.error.reason"] = reason

    def end(self) -> None:
        if self.ended is None:
            self.ended = time.time()

    @property
    def seconds(self) -> float:
        return (self.ended if self.ended is not None else time.time()) - self.started

    def walk(self) -> Iterator[Span]:
        yield self
        for child in self.children:
            yield from child.walk()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "operation": self.operation,
            "started": self.started,
            "seconds": round(self.seconds, 6),
            "status": self.status,
            "attributes": self.attributes,
        }
        if self.error is not None:
            out["error"] = self.error
        if self.children:
            out["children"] = [child.as_dict() for child in self.children]
        return out


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


@dataclass
class Trace:
    """The spans of one run, under one root span (the run itself)."""

    root: Span

    def as_dict(self) -> dict[str, Any]:
        return self.root.as_dict()

    def as_text(self, *, width: int = 100) -> str:
        """A tree for terminals: one line per span, with what matters most."""
        lines: list[str] = []

        def visit(span: Span, prefix: str, last: bool, top: bool) -> None:
            branch = "" if top else ("└─ " if last else "├─ ")
            mark = "" if span.status == "ok" else " ✗"
            summary = _summary(span)
            tail = _tail(span)
            line = f"{prefix}{branch}{span.name}{mark} ({span.seconds * 1000:.0f} ms)"
            if summary:
                line += f": {summary}"
            # The tail (who answered, the tokens) outlives the cut of a long reply.
            lines.append((shorten(line, max(width - len(tail), 40)) if width else line) + tail)
            if span.error:
                lines.append(f"{prefix}{'' if top else ('   ' if last else '│  ')}   {shorten(span.error, width)}")
            inner = prefix if top else prefix + ("   " if last else "│  ")
            for index, child in enumerate(span.children):
                visit(child, inner, index == len(span.children) - 1, False)

        visit(self.root, "", True, True)
        return "\n".join(lines)

    def spans(self, operation: str | None = None) -> list[Span]:
        """Every span, depth first; only those of ``operation`` when given."""
        return [s for s in self.root.walk() if operation is None or s.operation == operation]


def _summary(span: Span) -> str:
    a = span.attributes
    if span.operation == "chat":
        reply = a.get("registry.reply") or {}
        calls = reply.get("tool_calls") or []
        if calls:
            return "tool calls " + ", ".join(str(c.get("name")) for c in calls)
        return json.dumps(shorten(reply.get("content", ""), 60), ensure_ascii=False)
    if span.operation == "execute_tool":
        output = json.dumps(shorten(a.get("registry.tool.output", ""), 50), ensure_ascii=False)
        return f"{a.get('registry.tool.status')} → {output}"
    if span.operation == "parse":
        return str(a.get("registry.parse.kind", ""))
    if span.operation in ("gate", "route", "evaluate", "aggregate", "retrieve", "repair"):
        return str(a.get("registry.decision", ""))
    if span.operation in ("invoke_agent", "run"):
        outcome = a.get("registry.outcome")
        release = a.get("registry.release.tag")
        parts = [str(p) for p in (release and f"@ {release}", outcome) if p]
        return " ".join(parts)
    return ""


def _tail(span: Span) -> str:
    """What ends a model call's line whatever its length: the model that
    answered, when it is not the one asked for, what the adapter sent
    otherwise than asked, and the tokens."""
    if span.operation != "chat":
        return ""
    a = span.attributes
    tail = ""
    answered = a.get("gen_ai.response.model")
    if answered is not None and answered != a.get("gen_ai.request.model"):
        tail += f" (answered by {shorten(answered, 60)})"
    adjusted = a.get("registry.provider.adjusted")
    if adjusted:
        tail += f" (sent adjusted: {shorten(', '.join(adjusted), 60)})"
    if a.get("gen_ai.usage.input_tokens") is not None:
        tail += f" [{a.get('gen_ai.usage.input_tokens')}→{a.get('gen_ai.usage.output_tokens')} tokens]"
    return tail
