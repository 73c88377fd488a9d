"""Request bodies, read and parsed defensively.

A body is read once, refusing more than the configured maximum (a chunked
one too), and parsed as the JSON object a route takes: ``{"inputs": {...}}``
for a render, ``{"output": "..."}`` for a parse. Whatever a prompt cannot
carry is refused as ``InvalidRequest`` before any agent is looked at: JSON
that is not an object, unknown fields, NaN and infinities, nesting too deep
for the parser, and lone surrogates. A render body holding far more values
than the inputs budget allows is refused before it is parsed.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import Request

from registry.errors import InvalidInputs, InvalidRequest, PayloadTooLarge
from registry.format.inputbudget import holds_more_values
from registry.models import Issue

_RENDER_FIELDS = {"inputs"}
# Smaller bodies parse in well under a millisecond whatever they hold.
_SCANNED_BODY_BYTES = 16 * 1024
_CHUNK_BYTES = 65536


def read_body(request: Request, *, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes.

    Werkzeug refuses a too-large ``Content-Length`` itself, but it silently
    truncates a chunked body at the limit, so a chunked body is read from the
    server's (de-chunked) input here with one byte to spare.
    """
    if request.content_length is not None or not request.environ.get("wsgi.input_terminated"):
        return request.get_data(cache=False)
    source = request.environ["wsgi.input"]
    chunks, size = [], 0
    while size <= limit:
        chunk = source.read(min(_CHUNK_BYTES, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise PayloadTooLarge(f"the request body is larger than {limit} bytes")
    return b"".join(chunks)


def render_inputs(data: bytes, *, max_input_values: int) -> Any:
    """The inputs of a render body (``{}`` for an empty body)."""
    if not data.strip():
        return {}
    limit = max_input_values
    # Parsing a megabyte of small arrays costs tens of milliseconds
    # (registry.serving.slowlane); a body with twice the budget is refused unparsed.
    # Below that, measuring the parsed inputs names the input that is over.
    # The body's one member, inputs, is itself a value below its top.
    if len(data) > _SCANNED_BODY_BYTES and _is_utf8(data) and holds_more_values(data, 2 * limit + 1):
        issue = Issue(
            message=f"the request body holds more than {2 * limit:,} values; inputs may hold at most {limit:,}"
            " (each array, object, string, number, boolean or null)"
        )
        raise InvalidInputs(issue.message, [issue])
    body = _json_object(data, '{"inputs": {...}}')
    unknown = sorted(set(body) - _RENDER_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0][:80]!r} in the request body; expected only 'inputs'")
    inputs = body.get("inputs", {})
    if not isinstance(inputs, dict):
        raise InvalidRequest("inputs must be a JSON object of template variables")
    return inputs


def parse_output(data: bytes) -> str:
    """The model's reply of a parse body."""
    body = _json_object(data, '{"output": "..."}')
    unknown = sorted(set(body) - {"output"})
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0][:80]!r} in the request body; expected only 'output'")
    output = body.get("output")
    if not isinstance(output, str):
        raise InvalidRequest('the request body must be {"output": "<the model\'s reply>"} with a string')
    return output


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: parsing a megabyte of nested
    arrays allocates hundreds of thousands of containers, and the collector
    ran hundreds of times during it (215 of 240 ms), for objects that cannot
    form cycles. Concurrent callers are safe: only one that found it enabled
    enables it again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _json_object(data: bytes, shape: str) -> dict[str, Any]:
    """``data`` as a JSON object, refusing what a prompt cannot carry."""
    try:
        with _collector_paused():
            body = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise InvalidRequest("the request body is nested too deeply") from exc
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {_first_line(exc)}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object such as {shape}")
    if _may_hold_surrogates(data):
        try:
            # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8
            # response (or prompt) can carry.
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequest("the request body contains an unpaired surrogate (\\ud800-\\udfff escape)") from exc
    return body


# json.loads reads a UTF-8 body with "surrogatepass": a lone surrogate comes
# from a \ud800-\udfff escape or from its raw three-byte encoding.
_SURROGATE_SOURCE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _may_hold_surrogates(data: bytes) -> bool:
    """False when the decoded body certainly holds no lone surrogate, which
    spares re-encoding the whole body on every request."""
    return not _is_utf8(data) or _SURROGATE_SOURCE.search(data) is not None


def _is_utf8(data: bytes) -> bool:
    """Whether ``json.loads`` reads ``data`` as UTF-8 (json.detect_encoding's rule)."""
    return data[:2] not in (b"\xff\xfe", b"\xfe\xff") and b"\x00" not in data[:4]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
