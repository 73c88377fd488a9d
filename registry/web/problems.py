"""Errors to HTTP: the one place exceptions become RFC 9457 problem responses.

Every error response is ``application/problem+json`` with ``type``,
``title``, ``status`` and ``detail``, plus the error's own members (``errors``
for invalid definitions and inputs, ``available`` for unknown releases).
``type`` is ``/problems/<slug>``, a reference the registry itself resolves:
``GET /problems/<slug>`` describes the problem. No response ever carries a
traceback or a server path; an unexpected exception is logged and answered
with a bare ``internal-error``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from flask import Flask, Response
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from registry.errors import NotReady, RegistryError

log = logging.getLogger(__name__)

PROBLEM_TYPE_PREFIX = "/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

# Problems raised by the HTTP layer itself rather than by the service.
_HTTP_PROBLEMS: dict[int, tuple[str, str]] = {
    400: ("invalid-request", "Invalid request"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    413: ("payload-too-large", "Payload too large"),
    414: ("invalid-request", "Invalid request"),
    415: ("invalid-request", "Invalid request"),
    431: ("invalid-request", "Invalid request"),
}

# Problems that pass on their own, with the seconds a client should wait
# before asking again (``Retry-After``).
_RETRY_AFTER_SECONDS: dict[str, int] = {
    "not-ready": 5,
}

PROBLEM_DESCRIPTIONS: dict[str, str] = {
    "invalid-request": "The request is malformed: a usecase, name or release with the wrong syntax, "
    "a body that is not a JSON object, an unknown field, or a query parameter the route does not take "
    "or that is given twice; 'parameter' names the parameter.",
    "payload-too-large": "The request body is larger than the registry accepts.",
    "request-timeout": "The request body did not arrive within the deadline (REGISTRY_BODY_SECONDS); "
    "send it again, in full.",
    "uri-too-long": "The request line (method, path and query) is longer than the server reads (4094 bytes).",
    "headers-too-large": "The request has more headers, or longer ones, than the server reads.",
    "not-found": "No such route.",
    "release-not-found": "No release matches the one requested; 'available' lists the newest releases.",
    "agent-not-found": "The release has no definition for this usecase and name.",
    "invalid-definition": "The definition file exists but is invalid; 'errors' lists every problem "
    "with its file, line and JSON path.",
    "invalid-inputs": "The render inputs do not fit the definition's inputs schema; 'errors' lists "
    "every problem with its JSON path.",
    "render-error": "Rendering failed: an undefined variable, a missing include, a sandbox violation or a size limit.",
    "not-a-prompt": "The agent is a composite: it runs other agents and has no prompt of its own to render; "
    "'steps' lists each call it makes and the agent it runs.",
    "method-not-allowed": "The route exists but not for this HTTP method.",
    "store-unavailable": "The registry cannot read its repository right now.",
    "unauthorized": "The request needs a valid secret or token.",
    "not-ready": "The registry has not synced from its remote yet, or (on /readyz) its fetches have failed "
    "for too long; or (the Agent Protocol service) the tools it binds cannot start now. Ask again after "
    "Retry-After seconds, or another replica.",
    "internal-error": "An unexpected error; it has been logged.",
    "task-not-found": "No task with this id for this caller (the Agent Protocol service); a task another "
    "token created is not found either.",
    "step-not-found": "The task has no step with this id.",
    "artifact-not-found": "The task has no artifact with this id.",
    "agent-service-error": "The web UI asked the Agent Protocol service (REGISTRY_AGENTS_URL), and it refused"
    " the request or could not be reached; the detail says which.",
    "invalid-state": "The task, step or action is in a state that does not allow this request; 'state' is its "
    "state and 'allowed' what it allows (docs/agent-protocol.md has the tables).",
}


@dataclass(frozen=True)
class Problem:
    """A problem response whatever serves it: Flask here, Starlette in
    ``registry.protocol.asgi``."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str]

    def content(self) -> bytes:
        # ASCII-escaped: details may quote caller input, which a problem must
        # carry whatever it contains.
        return json.dumps(self.body).encode("ascii")


def problem(
    slug: str,
    status: int,
    title: str,
    detail: str,
    *,
    extensions: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Problem:
    """The problem's body and headers."""
    body = {
        "type": PROBLEM_TYPE_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
        **(extensions or {}),
    }
    # An error is about this request at this moment: no cache may keep it.
    return Problem(status, body, {"Cache-Control": "no-store", **(headers or {})})


def problem_response(
    slug: str,
    status: int,
    title: str,
    detail: str,
    *,
    extensions: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A problem+json response."""
    return _flask_response(problem(slug, status, title, detail, extensions=extensions, headers=headers))


def registry_problem(error: RegistryError, *, detail_member: str | None = None) -> Problem:
    """The problem that answers ``error`` (logged when it is the server's
    fault); ``detail_member`` repeats ``detail`` under another name, as
    ``register_error_handlers`` says."""
    if isinstance(error, NotReady):
        # Expected while a replica starts (every request until its first
        # sync), and logged by the syncer when it lasts: not an error each.
        log.debug("%s: %s", error.slug, error.detail)
    elif error.status >= 500:
        log.error("%s: %s", error.slug, error.detail, exc_info=error.__cause__ is not None)
    headers = error.response_headers()
    if error.slug in _RETRY_AFTER_SECONDS:
        headers.setdefault("Retry-After", str(_RETRY_AFTER_SECONDS[error.slug]))
    extensions = error.problem_fields()
    if detail_member is not None:
        extensions[detail_member] = error.detail
    return problem(error.slug, error.status, error.title, error.detail, extensions=extensions, headers=headers)


def _flask_response(answer: Problem) -> Response:
    response = Response(answer.content(), status=answer.status, mimetype=PROBLEM_MEDIA_TYPE)
    for name, value in answer.headers.items():
        response.headers[name] = value
    return response


def _registry_error(error: RegistryError) -> Response:
    return _flask_response(registry_problem(error))


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    slug, title = _HTTP_PROBLEMS.get(
        status, ("invalid-request", "Invalid request") if status < 500 else ("internal-error", "Internal error")
    )
    detail = _HTTP_DETAILS.get(status, error.description or title)
    headers: dict[str, str] = {}
    if isinstance(error, MethodNotAllowed) and error.valid_methods:
        # Werkzeug collects a route's methods in a set, whose order changes
        # with each process's hash seed: sorted, every worker answers alike.
        headers["Allow"] = ", ".join(sorted(error.valid_methods))
    return problem_response(slug, status, title, detail, headers=headers)


_HTTP_DETAILS = {
    404: "no such route; see /openapi.json for the API",
    405: "this route does not accept this method",
    413: "the request body is too large",
}


def internal_problem() -> Problem:
    """The bare answer to an unexpected error (which its server logs): no
    traceback, no path, nothing of what went wrong."""
    return problem("internal-error", 500, "Internal error", "an unexpected error occurred; it has been logged")


def _unexpected_error(error: Exception) -> Response:
    log.exception("unexpected error while answering a request")
    return _flask_response(internal_problem())


def register_error_handlers(app: Flask, *, detail_member: str | None = None) -> None:
    """Answer every error raised while handling a request as a problem.
    ``detail_member``: a member that repeats ``detail``, for an API whose
    published error schema names it otherwise (the Agent Protocol's ``message``)."""

    def also(response: Response) -> Response:
        if detail_member is not None:
            body = json.loads(response.get_data())
            body[detail_member] = body["detail"]
            response.set_data(json.dumps(body))
        return response

    app.register_error_handler(RegistryError, lambda error: also(_registry_error(error)))
    app.register_error_handler(HTTPException, lambda error: also(_http_error(error)))
    app.register_error_handler(Exception, lambda error: also(_unexpected_error(error)))
