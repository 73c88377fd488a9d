"""The HTTP API: parse the request, call one service method, serialise.

Views know nothing of git, YAML or Jinja; errors are raised as
``RegistryError`` and answered by ``registry.web.problems``. Who may call
what is ``registry.serving.auth``; reading request bodies is
``registry.web.requestbody``, parsing them ``registry.serving.requestbody``.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request
from werkzeug.routing import PathConverter, Rule

from registry.errors import InvalidRequest, NotFound, Unauthorized
from registry.models import Resolution, close_matches, did_you_mean, encode_json
from registry.serving.auth import authenticate
from registry.serving.metrics import SyncFacts
from registry.serving.requestbody import parse_output as parse_output_body
from registry.serving.requestbody import render_inputs
from registry.serving.service import RegistryService
from registry.serving.webhooks import is_authentic
from registry.settings import Settings
from registry.web.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from registry.web.problems import PROBLEM_DESCRIPTIONS, PROBLEM_TYPE_PREFIX
from registry.web.requestbody import read_body

bp = Blueprint("api", __name__)


class MalformedAgentPathConverter(PathConverter):
    """Any path under /v1/agents/ that is not ``<usecase>/<name>`` or
    ``<usecase>/<name>/render`` or ``.../parse``: those belong to the real
    routes, which then answer wrong methods with an exact ``Allow``."""

    regex = r"(?![^/]+/[^/]+(?:/render|/parse)?\Z).*?"
    part_isolating = False  # it spans "/"; Werkzeug guesses from the regex otherwise


SERVICE_KEY = "prompt_registry.service"
SETTINGS_KEY = "prompt_registry.settings"
OPENAPI_KEY = "prompt_registry.openapi"
QUERY_PARAMETERS_KEY = "prompt_registry.query_parameters"
MAX_WAIT_SECONDS = 60.0
IMMUTABLE = "max-age=31536000, immutable"
# Metric labels must stay few whatever clients send.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _service() -> RegistryService:
    service: RegistryService = current_app.extensions[SERVICE_KEY]
    return service


def _settings() -> Settings:
    settings: Settings = current_app.extensions[SETTINGS_KEY]
    return settings


@bp.before_app_request
def _admit() -> None:
    """Time the request, check its token, refuse unknown query parameters.

    One hook rather than three: Flask spends a few microseconds on each hook
    of every request, which showed on a warm GET.
    """
    g.started = time.perf_counter()
    authenticate(request.path, request.headers.get("Authorization", ""), _settings())
    _refuse_unknown_parameters()


def _refuse_unknown_parameters() -> None:
    """Refuse a query parameter the route does not declare, and one given twice.

    A misspelt ``relase`` would otherwise be ignored and the latest release
    served instead of the pinned one. What each route takes comes from
    registry/serving/openapi.yaml (``declared_query_parameters``), so the document
    and the code cannot disagree. No parameter of this API takes more than
    one value, so a repeated one is ambiguous rather than a list.
    """
    rule = request.url_rule
    if not request.args or rule is None:  # without a rule, routing answers 404 or 405
        return
    table: dict[tuple[str, str], frozenset[str]] = current_app.extensions[QUERY_PARAMETERS_KEY]
    allowed = table.get((rule.rule, request.method))
    if allowed is None:
        return  # the one undocumented route, which refuses every request itself
    for name, values in request.args.lists():
        if name not in allowed:
            shown = name[:80]
            raise InvalidRequest(_unknown_parameter(shown, allowed), parameter=shown)
        if len(values) > 1:
            raise InvalidRequest(f"the {name} parameter is given more than once; give it once", parameter=name)


def _unknown_parameter(name: str, allowed: frozenset[str]) -> str:
    detail = f"unknown query parameter {name!r}"
    # Above difflib's default (0.6), which would offer 'from' for 'format'.
    suggestion = did_you_mean(close_matches(name, sorted(allowed), limit=1, cutoff=0.75))
    if suggestion:
        return f"{detail}; {suggestion}"
    if not allowed:
        return f"{detail}; this route takes no query parameters"
    return f"{detail}; this route takes {', '.join(repr(known) for known in sorted(allowed))}"


_RULE_VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
_HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def declared_query_parameters(
    rules: Iterable[Rule], document: Mapping[str, Any]
) -> dict[tuple[str, str], frozenset[str]]:
    """The query parameters each route takes, by (rule, method), as the OpenAPI document declares them.

    HEAD takes what GET takes, and OPTIONS what any method of its path takes.
    A rule the document does not describe is left out.
    """
    table: dict[tuple[str, str], frozenset[str]] = {}
    for rule in rules:
        item = document["paths"].get(_RULE_VARIABLE.sub(r"{\1}", rule.rule))
        if item is None:
            continue
        shared = _query_names(document, item.get("parameters", []))
        by_method = {
            method.upper(): shared | _query_names(document, operation.get("parameters", []))
            for method, operation in item.items()
            if method in _HTTP_METHODS
        }
        by_method.setdefault("HEAD", by_method.get("GET", frozenset()))
        by_method["OPTIONS"] = frozenset().union(*by_method.values())
        for method in rule.methods or ():
            table[(rule.rule, method)] = by_method.get(method, frozenset())
    return table


def _query_names(document: Mapping[str, Any], parameters: list[dict[str, Any]]) -> frozenset[str]:
    names = set()
    for parameter in parameters:
        if "$ref" in parameter:
            # The document refers only within itself: "#/components/parameters/<name>".
            target: Any = document
            for part in parameter["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            parameter = target
        if parameter["in"] == "query":
            names.add(parameter["name"])
    return frozenset(names)


@bp.after_app_request
def _observe(response: Response) -> Response:
    rule = request.url_rule
    method = request.method
    started = g.get("started")
    _service().metrics.request_answered(
        rule.rule if rule is not None else "unmatched",
        method if method in _METHODS else "other",
        response.status_code,
        time.perf_counter() - started if started is not None else None,
    )
    return response


def _release_parameter() -> str | None:
    release = request.args.get("release")
    if release == "":
        raise InvalidRequest("release must not be empty; leave it out for the latest release", parameter="release")
    return release


def _with_provenance(response: Response, resolution: Resolution) -> Response:
    """Provenance and caching headers.

    A request for one release tag gets an answer that never changes, so any
    cache may keep it for good; a range, ``latest``, a channel or the
    worktree may resolve differently tomorrow, so those are kept briefly.
    With tokens required, only the client's own cache may keep answers.
    """
    # add(), not item assignment: a new response has none of these, and
    # assignment scans for an old value first.
    response.headers.add("X-Registry-Release", resolution.release.tag)
    response.headers.add("X-Registry-Commit", resolution.release.commit)
    return _cacheable(response, immutable=resolution.immutable)


def _cacheable(response: Response, *, immutable: bool) -> Response:
    """``Cache-Control`` for an answer about releases: for good when every
    release it names is an exact tag, briefly otherwise; with tokens
    required, only the client's own cache may keep it."""
    settings = _settings()
    scope = "private" if settings.api_tokens else "public"
    lifetime = IMMUTABLE if immutable else f"max-age={settings.cache_max_age}"
    response.headers.add("Cache-Control", f"{scope}, {lifetime}")
    if settings.api_tokens:
        response.headers.add("Vary", "Authorization")
    return response


def _client_has(etag: str) -> bool:
    """``If-None-Match`` names ``etag`` (weak comparison, RFC 9110 13.1.2)."""
    return "If-None-Match" in request.headers and request.if_none_match.contains_weak(etag)


def _conditional(response: Response, etag: str) -> Response:
    """Tag ``response`` with ``etag``; a ``304`` when the client has it.

    Werkzeug's ``make_conditional`` also handles dates and byte ranges,
    which these answers do not use, at a cost that shows on the hot path.
    """
    response.set_etag(etag)
    if _client_has(etag):
        response.status_code = 304  # Werkzeug sends no body with a 304
    return response


def _json_bytes(body: bytes) -> Response:
    return current_app.response_class(body, mimetype="application/json")


@bp.get("/v1/releases")
def list_releases() -> Response:
    known = _if_none_match()
    wait = _preferred_wait()
    overview, waited = _service().releases_after(known, wait=wait)
    response = jsonify(overview.as_dict())
    response.set_etag(overview.etag)
    if waited:
        response.headers["Preference-Applied"] = f"wait={wait:g}"
    response.headers["Vary"] = "Prefer, Authorization" if _settings().api_tokens else "Prefer"
    # Watched for changes: every use revalidates (cheaply, by ETag).
    response.headers["Cache-Control"] = "no-cache"
    response.make_conditional(request)  # in place: a 304 when the client has this overview
    return response


@bp.get("/v1/agents")
def list_agents() -> Response:
    listing = _service().list_agents(release=_release_parameter())
    body = {"release": listing.resolution.as_dict(), "agents": [a.as_dict() for a in listing.agents]}
    return _with_provenance(_json_bytes(encode_json(body) + b"\n"), listing.resolution)


@bp.get("/v1/agents/<usecase>/<name>")
def get_agent(usecase: str, name: str) -> Response:
    answer = _service().get_agent(usecase, name, release=_release_parameter())
    # The hot path: both parts were encoded once, when first used.
    body = b'{"release":%b,%b}\n' % (answer.resolution.json, answer.agent.answer_json)
    if answer.reached:
        # A composite: every agent it can run, each as its own GET answers it (but its graph).
        agents = b",".join(
            b'"%s/%s":{%b}' % (a.usecase.encode(), a.name.encode(), a.member_json) for a in answer.reached
        )
        body = body[:-2] + b',"agents":{%b}}\n' % agents
    response = _with_provenance(_json_bytes(body), answer.resolution)
    return _conditional(response, answer.agent.digest)


@bp.post("/v1/agents/<usecase>/<name>/render")
def render_agent(usecase: str, name: str) -> Response:
    service = _service()
    inputs = render_inputs(_request_body(), max_input_values=service.render_limits.max_input_values)
    answer = service.get_agent(usecase, name, release=_release_parameter())
    # A client that has the result is told so before anything is rendered.
    # Without If-None-Match the render comes first, so that inputs over their
    # budget are refused before a megabyte of them is hashed.
    etag = answer.render_etag(inputs) if request.if_none_match else None
    if etag is not None and _client_has(etag):
        return _conditional(_with_provenance(current_app.response_class(), answer.resolution), etag)
    rendered = service.render_answer(answer, inputs)
    response = _with_provenance(_json_bytes(encode_json(rendered.as_dict()) + b"\n"), rendered.resolution)
    response.set_etag(etag or answer.render_etag(inputs))
    return response


@bp.post("/v1/agents/<usecase>/<name>/parse")
def parse_output(usecase: str, name: str) -> Response:
    """The model's reply parsed by the agent's output parser: a tool call, a
    final answer, or a parse error with an observation (all answered 200)."""
    output = parse_output_body(_request_body())
    answer = _service().parse(usecase, name, output, release=_release_parameter())
    return _with_provenance(_json_bytes(encode_json(answer.as_dict()) + b"\n"), answer.resolution)


@bp.get("/v1/diff")
def diff_releases() -> Response:
    """What changed between two releases: agents added, removed and changed,
    with template, partial and example diffs."""
    source, target = _required_parameter("from"), _required_parameter("to")
    answer = _service().compare(source, target)
    response = _json_bytes(encode_json(answer.diff.as_dict()) + b"\n")
    return _cacheable(response, immutable=answer.immutable)


def _required_parameter(name: str) -> str:
    value = request.args.get(name)
    if not value:
        raise InvalidRequest(f"give {name}=<release> (a version, range, channel or latest)", parameter=name)
    return value


@bp.get("/v1/bundle")
def export_bundle() -> Response:
    """Every agent and partial of a release in one file, for a client to ship
    as its fallback (``prompt-registry export --url``)."""
    resolution, bundle = _service().export_bundle(_release_parameter())
    response = _with_provenance(_json_bytes(bundle), resolution)
    # Equal content gives equal bytes, so the bytes' hash names the bundle.
    return _conditional(response, "bundle-" + hashlib.sha256(bundle).hexdigest()[:40])


@bp.route("/v1/agents/<malformed_agent_path:rest>", methods=["GET", "POST"])
def malformed_agent_path(rest: str) -> Response:
    raise InvalidRequest(
        "agent paths are /v1/agents/<usecase>/<name>, and .../render and .../parse under it;"
        " usecase and name may not contain '/'"
    )


@bp.post("/v1/hooks/git")
def git_hook() -> Response:
    secret = _settings().webhook_secret
    service = _service()
    if not secret or service.syncer is None:
        raise NotFound("webhooks are not enabled: serve a --remote with --webhook-secret")
    if not is_authentic(request.headers, request.get_data(cache=False), secret):
        raise Unauthorized("the webhook secret is missing or wrong")
    service.request_sync()
    response = jsonify({"status": "accepted"})
    response.status_code = 202
    return response


@bp.post("/v1/admin/sync")
def admin_sync() -> Response:
    _service().request_sync()
    response = jsonify({"status": "accepted"})
    response.status_code = 202
    return response


@bp.get("/v1/admin/cache")
def admin_cache() -> Response:
    return jsonify(_service().cache_status())


@bp.get("/metrics")
def metrics() -> Response:
    service = _service()
    facts = [SyncFacts(service.syncer.status)] if service.syncer is not None else []
    return Response(service.metrics.exposition(*facts), content_type=METRICS_CONTENT_TYPE)


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
    return read_body(request, limit=_settings().max_request_bytes)


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
