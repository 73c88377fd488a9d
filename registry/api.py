"""The HTTP API: parse the request, call one service method, serialise.

Views know nothing of git, YAML or Jinja; errors are raised as
``RegistryError`` and answered by ``registry.problems``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.routing import PathConverter

from registry.errors import InvalidRequest, NotFound, PayloadTooLarge, Unauthorized
from registry.models import Resolution
from registry.problems import PROBLEM_DESCRIPTIONS, PROBLEM_TYPE_PREFIX
from registry.service import RegistryService
from registry.webhooks import is_authentic

bp = Blueprint("api", __name__)


class MalformedAgentPathConverter(PathConverter):
    """Any path under /v1/agents/ that is not ``<usecase>/<name>`` or
    ``<usecase>/<name>/render``: those belong to the real routes, which then
    answer wrong methods with an exact ``Allow``."""

    regex = r"(?![^/]+/[^/]+(?:/render)?\Z).*?"
    part_isolating = False  # it spans "/"; Werkzeug guesses from the regex otherwise


SERVICE_KEY = "prompt_registry.service"
OPENAPI_KEY = "prompt_registry.openapi"
_RENDER_FIELDS = {"inputs"}
MAX_WAIT_SECONDS = 60.0


def _service() -> RegistryService:
    service: RegistryService = current_app.extensions[SERVICE_KEY]
    return service


def _release_parameter() -> str | None:
    values = request.args.getlist("release")
    if len(values) > 1:
        raise InvalidRequest("give the release parameter at most once", parameter="release")
    if values and values[0] == "":
        raise InvalidRequest("release must not be empty; leave it out for the latest release", parameter="release")
    return values[0] if values else None


def _with_provenance(response: Response, resolution: Resolution) -> Response:
    response.headers["X-Registry-Release"] = resolution.release.tag
    response.headers["X-Registry-Commit"] = resolution.release.commit
    return response


def _conditional(response: Response, etag: str) -> Response:
    response.set_etag(etag)
    return response.make_conditional(request)


@bp.get("/v1/releases")
def list_releases() -> Response:
    known = _if_none_match()
    wait = _preferred_wait()
    overview, waited = _service().releases_after(known, wait=wait)
    response = jsonify(overview.as_dict())
    response.set_etag(overview.etag)
    if waited:
        response.headers["Preference-Applied"] = f"wait={wait:g}"
    response.headers["Vary"] = "Prefer"
    return response.make_conditional(request)


@bp.get("/v1/agents")
def list_agents() -> Response:
    listing = _service().list_agents(release=_release_parameter())
    body = {"release": listing.resolution.as_dict(), "agents": [a.as_dict() for a in listing.agents]}
    return _with_provenance(jsonify(body), listing.resolution)


@bp.get("/v1/agents/<usecase>/<name>")
def get_agent(usecase: str, name: str) -> Response:
    answer = _service().get_agent(usecase, name, release=_release_parameter())
    agent = answer.agent
    body = {
        "release": answer.resolution.as_dict(),
        "usecase": agent.usecase,
        "name": agent.name,
        "path": agent.path,
        "digest": agent.digest,
        "definition": agent.compiled.definition,
    }
    return _conditional(_with_provenance(jsonify(body), answer.resolution), agent.digest)


@bp.post("/v1/agents/<usecase>/<name>/render")
def render_agent(usecase: str, name: str) -> Response:
    inputs = _render_inputs()
    answer = _service().render(usecase, name, inputs, release=_release_parameter())
    body = {
        "release": answer.resolution.as_dict(),
        "usecase": answer.agent.usecase,
        "name": answer.agent.name,
        "digest": answer.agent.digest,
        "messages": answer.prompt.as_dicts(),
        "model": answer.prompt.model,
        "params": answer.prompt.params,
    }
    return _with_provenance(jsonify(body), answer.resolution)


@bp.route("/v1/agents/<malformed_agent_path:rest>", methods=["GET", "POST"])
def malformed_agent_path(rest: str) -> Response:
    raise InvalidRequest(
        "agent paths are /v1/agents/<usecase>/<name> and /v1/agents/<usecase>/<name>/render;"
        " usecase and name may not contain '/'"
    )


@bp.post("/v1/hooks/git")
def git_hook() -> Response:
    secret = current_app.config.get("REGISTRY_WEBHOOK_SECRET")
    service = _service()
    if not secret or service.syncer is None:
        raise NotFound("webhooks are not enabled: serve a --remote with --webhook-secret")
    if not is_authentic(request.headers, request.get_data(cache=False), secret):
        raise Unauthorized("the webhook secret is missing or wrong")
    service.request_sync()
    response = jsonify({"status": "accepted"})
    response.status_code = 202
    return response


@bp.get("/readyz")
def readyz() -> Response:
    return jsonify(_service().readiness())


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(current_app.extensions[OPENAPI_KEY])


@bp.get("/problems/<slug>")
def problem_type(slug: str) -> Response:
    description = PROBLEM_DESCRIPTIONS.get(slug)
    if description is None:
        raise NotFound("no such problem type")
    return jsonify({"type": PROBLEM_TYPE_PREFIX + slug, "description": description})


def _request_body() -> bytes:
    """The body, refusing more than the configured maximum.

    Werkzeug refuses a too-large ``Content-Length`` itself, but it silently
    truncates a chunked body at the limit, so a chunked body is read from the
    server's (de-chunked) input here with one byte to spare.
    """
    if request.content_length is not None or not request.environ.get("wsgi.input_terminated"):
        return request.get_data(cache=False)
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    source = request.environ["wsgi.input"]
    chunks, size = [], 0
    while size <= limit:
        chunk = source.read(min(65536, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise PayloadTooLarge(f"the request body is larger than {limit} bytes")
    return b"".join(chunks)


def _if_none_match() -> str | None:
    tags = request.if_none_match
    return next(iter(tags.as_set()), None) if tags and len(tags.as_set()) == 1 else None


def _preferred_wait() -> float:
    """``Prefer: wait=N`` (RFC 7240), at most ``MAX_WAIT_SECONDS``; 0 without one."""
    for preference in request.headers.get("Prefer", "").split(","):
        name, _, value = preference.strip().partition("=")
        if name.strip().lower() == "wait":
            try:
                seconds = float(value.strip().strip('"'))
            except ValueError:
                return 0.0
            return min(max(seconds, 0.0), MAX_WAIT_SECONDS) if math.isfinite(seconds) else 0.0
    return 0.0


def _render_inputs() -> Any:
    data = _request_body()
    if not data.strip():
        return {}
    try:
        body = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise InvalidRequest("the request body is nested too deeply") from exc
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {_first_line(exc)}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest('the request body must be a JSON object such as {"inputs": {...}}')
    try:
        # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8
        # response (or prompt) can carry.
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest("the request body contains an unpaired surrogate (\\ud800-\\udfff escape)") from exc
    unknown = sorted(set(body) - _RENDER_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0][:80]!r} in the request body; expected only 'inputs'")
    inputs = body.get("inputs", {})
    if not isinstance(inputs, dict):
        raise InvalidRequest("inputs must be a JSON object of template variables")
    return inputs


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
