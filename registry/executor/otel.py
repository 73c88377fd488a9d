"""OpenTelemetry spans from a finished trace, when the optional dependency
(``opentelemetry-api``, with an SDK configured by the application) is installed.

Spans are emitted after the run, from the recorded tree, with their real
start and end times, so the runtime carries no tracing context of its own.
Attribute values OpenTelemetry cannot carry (mappings, lists of mappings)
are sent as JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from registry.executor.trace import Span, Trace

try:
    from opentelemetry import trace as otel_trace
except ImportError:  # the optional dependency is not installed: traces stay plain data
    otel_trace = None  # type: ignore[assignment]


def emit(trace: Trace, provider: Any = None) -> None:
    """Send ``trace`` to ``provider``, by default the globally configured
    tracer provider (a no-op one unless the application set one)."""
    if otel_trace is None:
        return
    tracer = otel_trace.get_tracer("prompt-registry.executor", tracer_provider=provider)
    _emit(tracer, trace.root, None)


def _emit(tracer: Any, span: Span, parent: Any) -> None:
    context = otel_trace.set_span_in_context(parent) if parent is not None else None
    started = int(span.started * 1e9)
    ended = int((span.ended if span.ended is not None else span.started) * 1e9)
    emitted = tracer.start_span(span.name, context=context, start_time=started, attributes=_attributes(span))
    if span.status != "ok":
        emitted.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, span.error))
    for child in span.children:
        _emit(tracer, child, emitted)
    emitted.end(end_time=ended)


def _attributes(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {"registry.operation": span.operation}
    for key, value in span.attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (str, bool, int, float)) for v in value):
            out[key] = list(value)
        else:
            out[key] = json.dumps(value, ensure_ascii=False, default=str)
    return out
