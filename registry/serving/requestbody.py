"""The bodies of the registry's routes: ``{"inputs": {...}}`` for a render,
``{"output": "..."}`` for a parse.

A body is parsed defensively (``registry.web.requestbody``) and refused as
``InvalidRequest`` before any agent is looked at when it has unknown
fields or members of the wrong type. A render body holding far more values
than the inputs budget allows is refused before it is parsed.
"""

from __future__ import annotations

from typing import Any

from registry.errors import InvalidInputs, InvalidRequest
from registry.format.inputbudget import holds_more_values
from registry.models import Issue
from registry.web.requestbody import is_utf8, json_object

_RENDER_FIELDS = {"inputs"}
# Smaller bodies parse in well under a millisecond whatever they hold.
_SCANNED_BODY_BYTES = 16 * 1024


def render_inputs(data: bytes, *, max_input_values: int) -> Any:
    """The inputs of a render body (``{}`` for an empty body)."""
    if not data.strip():
        return {}
    limit = max_input_values
    # Parsing a megabyte of small arrays costs tens of milliseconds
    # (registry.web.slowlane); a body with twice the budget is refused unparsed.
    # Below that, measuring the parsed inputs names the input that is over.
    # The body's one member, inputs, is itself a value below its top.
    if len(data) > _SCANNED_BODY_BYTES and is_utf8(data) and holds_more_values(data, 2 * limit + 1):
        issue = Issue(
            message=f"the request body holds more than {2 * limit:,} values; inputs may hold at most {limit:,}"
            " (each array, object, string, number, boolean or null)"
        )
        raise InvalidInputs(issue.message, [issue])
    body = json_object(data, '{"inputs": {...}}')
    unknown = sorted(set(body) - _RENDER_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0][:80]!r} in the request body; expected only 'inputs'")
    inputs = body.get("inputs", {})
    if not isinstance(inputs, dict):
        raise InvalidRequest("inputs must be a JSON object of template variables")
    return inputs


def parse_output(data: bytes) -> str:
    """The model's reply of a parse body."""
    body = json_object(data, '{"output": "..."}')
    unknown = sorted(set(body) - {"output"})
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0][:80]!r} in the request body; expected only 'output'")
    output = body.get("output")
    if not isinstance(output, str):
        raise InvalidRequest('the request body must be {"output": "<the model\'s reply>"} with a string')
    return output
