"""The pages of the UI. Each view reads what the API reads, through the same
service, and hands plain data to a template; templates escape everything
(agent text is untrusted) and are the only place HTML is made, but for the
SVG of a pattern graph and Pygments' highlighted spans (both escaped where
they are made)."""

from __future__ import annotations

import json
import logging
import secrets
import shlex
import weakref
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timezone
from functools import partial
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Flask, Response, current_app, g, redirect, render_template, request, url_for
from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.wrappers import Response as BaseResponse

from registry.errors import AgentServiceError, ConfigurationError, InvalidRequest, RegistryError
from registry.format.diff import AgentChange, classify
from registry.models import close_matches, did_you_mean
from registry.serving.answers import RenderAnswer
from registry.serving.api import SERVICE_KEY, SETTINGS_KEY
from registry.serving.evalcases import SHOWN, EvalCaseReader
from registry.serving.service import RegistryService
from registry.serving.ui import security, tasks
from registry.serving.ui.forms import Field, FormError, form_fields, inputs_from_form
from registry.serving.ui.graphsvg import graph_svg
from registry.serving.ui.highlight import highlighted, pygments_css
from registry.serving.ui.rendered import shown_render
from registry.serving.ui.sessions import LazySignedOut, UiSessions, signed_out_store
from registry.settings import Settings

log = logging.getLogger(__name__)
bp = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates", static_folder="static")

EVAL_CASES_KEY = "prompt_registry.ui.eval_cases"
_KINDS = {"vanilla": "vanilla", "tool_calling": "tool calling", "rag": "retrieval (rag)", "react": "ReAct"}


def install(app: Flask, settings: Settings) -> None:
    """Add the UI to ``app``: its sessions, its client of the Agent Protocol service, its pages."""
    # One secret signs the cookie and keys the sealing of the token in it.
    secret = settings.ui_secret or secrets.token_urlsafe(32)
    sessions = None
    if security.login_required(settings):
        # Made at the first sign-in: an app whose UI nobody uses never needs it.
        signed_out = LazySignedOut(partial(signed_out_store, settings))
        weakref.finalize(app, signed_out.close)
        sessions = UiSessions(secret, signed_out)
    security.install(app, settings, secret=secret, sessions=sessions)
    tasks.install(app, settings)
    app.extensions[EVAL_CASES_KEY] = EvalCaseReader(app.extensions[SERVICE_KEY].store)
    app.register_blueprint(bp)


def service() -> RegistryService:
    found: RegistryService = current_app.extensions[SERVICE_KEY]
    return found


def settings() -> Settings:
    found: Settings = current_app.extensions[SETTINGS_KEY]
    return found


def eval_cases() -> EvalCaseReader:
    found: EvalCaseReader = current_app.extensions[EVAL_CASES_KEY]
    return found


# The query parameters each page reads: any other is refused, as the API
# refuses it, so that a misspelt ?relase= never quietly shows the latest.
_PAGE_PARAMETERS = {
    "ui.agents": {"release"},
    "ui.agent": {"release", "example"},
    "ui.render": {"release"},
    "ui.diff": {"from", "to"},
    "ui.task_list": {"page"},
    "ui.task_events": {"after"},
    "ui.login": {"next"},
    "ui.static": {"v"},
    "ui.unknown_page": set(),
}


@bp.before_request
def known_parameters() -> None:
    allowed = _PAGE_PARAMETERS.get(request.endpoint or "", set())
    for name in request.args:
        if name not in allowed:
            hint = did_you_mean(close_matches(name, sorted(allowed)))
            raise InvalidRequest(
                f"this page takes no query parameter {name!r}{'; ' + hint if hint else ''}", parameter=name
            )
        if len(request.args.getlist(name)) > 1:
            raise InvalidRequest(f"the query parameter {name!r} is given twice", parameter=name)


@bp.before_request
def signed_in() -> BaseResponse | tuple[str, int] | None:
    """Pages need a signed-in token when the registry has tokens."""
    g.login_required = security.login_required(settings())
    open_routes = ("ui.login", "ui.static", "ui.stylesheet")
    if g.login_required and request.endpoint not in open_routes:
        try:
            signed = security.is_signed_in(settings())
        except ConfigurationError as exc:
            return _cannot_sign_in(exc)
        if not signed:
            return redirect(url_for("ui.login", next=request.full_path if request.method == "GET" else None))
    if request.method == "POST" and request.endpoint != "ui.login":
        security.check_csrf()
    return None


@bp.after_request
def headers(response: Response) -> Response:
    return security.secure_headers(response)


def submitted(field: Field) -> str | None:
    """What a playground field shows: what was just sent, else its default."""
    if request.method != "POST":
        return field.default
    if field.kind == "checkbox":
        return "true" if field.name in request.form else "false"
    return request.form.get(field.name, field.default)


@bp.app_context_processor
def page_globals() -> dict[str, Any]:
    return {
        "submitted": submitted,
        "csrf_token": security.csrf_token,
        "csrf_field": security.CSRF_FIELD,
        "tasks_enabled": bool(settings().agents_url),
        "signed_in": _shows_signed_in(),
        "login_required": security.login_required(settings()),
    }


def _shows_signed_in() -> bool:
    try:
        return security.signed_in_token() is not None
    except ConfigurationError:
        return False  # signing in, or any page behind it, says why


@bp.app_template_filter("counted")
def counted(number: int, singular: str, plural: str | None = None) -> str:
    """``1 model call``, ``2 model calls``."""
    return f"{number} {singular if number == 1 else plural or singular + 's'}"


@bp.app_template_filter("as_json")
def as_json(value: Any, indent: int | None = None) -> str:
    """JSON as a person reads it (the template escapes it; ``tojson`` would show ``\\u003c``)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


@bp.app_template_filter("utc")
def utc(moment: str, form: str = "%Y-%m-%d %H:%M:%S UTC") -> str:
    """An ISO 8601 time in UTC, as ``2025-07-07 17:47:03 UTC`` (or ``form``);
    the text as given when it is not one."""
    try:
        parsed = datetime.fromisoformat(moment)
    except (TypeError, ValueError):
        return str(moment)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).strftime(form)


@bp.errorhandler(RegistryError)
def registry_error(error: RegistryError) -> tuple[str, int]:
    return render_template(
        "error.html",
        title=error.title,
        status=error.status,
        slug=error.slug,
        detail=error.detail,
        errors=getattr(error, "errors", []),
    ), error.status


@bp.errorhandler(HTTPException)
def http_error(error: HTTPException) -> tuple[str, int]:
    status = error.code or 500
    return render_template(
        "error.html", title=error.name, status=status, slug=None, detail=error.description, errors=[]
    ), status


# --- sign in -----------------------------------------------------------------------------


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    next_page = _local(request.values.get("next"))
    if request.method == "POST":
        security.check_csrf()
        try:
            accepted = security.sign_in(request.form.get("token", ""), settings())
        except ConfigurationError as exc:
            return _cannot_sign_in(exc)
        if accepted:
            return redirect(next_page or url_for("ui.releases"))
        return render_template("login.html", error="That token is not one of this registry's.", next=next_page), 401
    return render_template("login.html", error=None, next=next_page)


@bp.post("/logout")
def logout() -> Any:
    try:
        security.sign_out()
    except ConfigurationError as exc:
        return _cannot_sign_in(exc)
    return redirect(url_for("ui.login") if security.login_required(settings()) else url_for("ui.releases"))


def _cannot_sign_in(problem: ConfigurationError) -> tuple[str, int]:
    """The page for sessions that cannot be kept: only signing in is out of
    service, so it is a 503, not the 500 of a broken registry. Why (a
    directory, its owner) is the operator's to read, in the log: the page
    shows no server path to whoever tries to sign in."""
    log.error("the UI cannot keep sessions: %s", problem.detail)
    detail = (
        "Signing in is out of service on this server: it cannot keep track of sign-outs. The operator's log says why."
    )
    return render_template("error.html", title="Cannot sign in", status=503, slug=None, detail=detail, errors=[]), 503


def _local(target: str | None) -> str | None:
    """Only a path of this site is a place to go back to (no open redirect)."""
    if target and target.startswith("/ui") and not target.startswith("//") and "\\" not in target:
        return target
    return None


# --- releases and agents -----------------------------------------------------------------


@bp.get("/")
def releases() -> str:
    overview = service().releases()
    body = overview.as_dict()
    try:
        readiness = service().readiness()
    except RegistryError as exc:
        readiness = {"status": "not ready", "detail": exc.detail, **exc.extensions}
    return render_template(
        "releases.html",
        releases=overview.index.releases,
        latest=body["latest"],
        channels=body["channels"],
        channel_errors=body.get("channel_errors", []),
        readiness=readiness,
    )


@bp.get("/agents")
def agents() -> str:
    release = _release()
    listing = service().list_agents(release=release)
    rows = []
    for summary in listing.agents:
        kind, composite = None, False
        if summary.valid:
            spec = service().get_agent(summary.usecase, summary.name, release=release).agent.spec
            composite = spec.is_composite
            kind = spec.pattern_kind if composite else _KINDS.get(spec.kind)
        rows.append({"summary": summary, "kind": kind, "composite": composite})
    return render_template("agents.html", resolution=listing.resolution, rows=rows, release=release)


@bp.get("/agents/<usecase>/<name>")
def agent(usecase: str, name: str) -> str:
    return _agent_page(usecase, name, values=None, rendered=None, form_errors=[], problem=None)


@bp.post("/agents/<usecase>/<name>")
def render(usecase: str, name: str) -> tuple[str, int]:
    release = _release()
    answer = service().get_agent(usecase, name, release=release)
    inputs, form_errors = inputs_from_form(answer.agent.spec.inputs, request.form)
    rendered, problem = None, None
    if not form_errors:
        try:
            rendered = service().render(usecase, name, inputs, release=release)
        except RegistryError as exc:
            problem = exc
    status = 200 if rendered is not None else 422
    return _agent_page(
        usecase, name, values=inputs, rendered=rendered, form_errors=form_errors, problem=problem
    ), status


def _agent_page(
    usecase: str,
    name: str,
    *,
    values: Mapping[str, Any] | None,
    rendered: RenderAnswer | None,
    form_errors: list[FormError],
    problem: RegistryError | None,
) -> str:
    release = _release()
    answer = service().get_agent(usecase, name, release=release)
    loaded = answer.agent
    spec = loaded.spec
    examples = [e for e in spec.examples if isinstance(e, dict)]
    chosen = request.args.get("example")
    if values is None and examples:
        example = next((e for e in examples if e.get("name") == chosen), examples[0])
        values, chosen = example.get("inputs"), str(example.get("name"))
    composite = spec.is_composite
    graph = loaded.graph
    svg = None
    if composite and graph is not None:
        svg = graph_svg(graph, href=lambda agent: _agent_url(agent, release), title=f"{usecase}/{name}")
    templates = [
        {"role": role, "html": highlighted(source, "jinja"), "lines": len(source.splitlines()) or 1}
        for role, source in spec.templates
    ]
    partials = sorted(loaded.partials)
    pinned = answer.resolution.release
    return render_template(
        "agent.html",
        usecase=usecase,
        name=name,
        release=release,
        resolution=answer.resolution,
        agent=loaded,
        definition=loaded.definition,
        spec=spec,
        kind=_KINDS.get(spec.kind),
        composite=composite,
        svg=svg,
        graph=graph,
        templates=templates,
        partials=[{"name": p, "html": highlighted(loaded.partials[p], "jinja")} for p in partials],
        inputs_rows=_input_rows(spec.inputs),
        fields=[] if composite else form_fields(spec.inputs, values=values),
        examples=[str(e.get("name")) for e in examples],
        chosen_example=chosen,
        rendered=shown_render(rendered.prompt, rendered.agent.spec) if rendered is not None else None,
        form_errors=form_errors,
        problem=problem,
        snippets=_snippets(usecase, name, answer.resolution.release.tag, values or {}),
        source_html=highlighted(json.dumps(loaded.definition, indent=2, ensure_ascii=False), "json"),
        # The eval file of the same commit as the page, and its judges at the same tag.
        evals=eval_cases().of_agent(pinned, usecase, name),
        evals_shown=SHOWN,
        judge_url=lambda judge: _agent_url(judge, pinned.tag),
    )


def _input_rows(schema: Any) -> list[dict[str, Any]]:
    if not isinstance(schema, dict):
        return []
    declared = schema.get("properties")
    properties: dict[str, Any] = declared if isinstance(declared, dict) else {}
    required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
    rows = []
    for prop, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        constraints = {k: v for k, v in spec.items() if k not in ("type", "description", "default", "title")}
        rows.append(
            {
                "name": prop,
                "type": spec.get("type", "any"),
                "required": prop in required,
                "default": json.dumps(spec["default"], ensure_ascii=False) if "default" in spec else None,
                "description": spec.get("description"),
                "constraints": json.dumps(constraints, ensure_ascii=False) if constraints else None,
            }
        )
    return rows


def _snippets(usecase: str, name: str, tag: str, inputs: Mapping[str, Any]) -> dict[str, str]:
    base = request.host_url.rstrip("/")
    body = json.dumps({"inputs": dict(inputs)}, ensure_ascii=False)
    url = f"{base}/v1/agents/{usecase}/{name}/render?{urlencode({'release': tag})}"
    curl = f"curl -s -X POST {shlex.quote(url)} \\\n  -H 'Content-Type: application/json' \\\n  -d {shlex.quote(body)}"
    client = (
        "from registry.client import RegistryClient\n\n"
        f"client = RegistryClient({base!r}, release={tag!r})\n"
        f"prompt = client.get({usecase!r}, {name!r}).render({json.dumps(dict(inputs), ensure_ascii=False)})\n"
        "print(prompt.as_dicts())\n"
    )
    return {"curl": curl, "client": client}


def _agent_url(agent: str, release: str | None) -> str:
    usecase, _, name = agent.partition("/")
    query: dict[str, Any] = {"release": release} if release else {}
    return url_for("ui.agent", usecase=usecase, name=name, **query)


def _release() -> str | None:
    release = request.args.get("release")
    return release if release else None


# --- diff --------------------------------------------------------------------------------


@bp.get("/diff")
def diff() -> tuple[str, int]:
    source, target = request.args.get("from"), request.args.get("to")
    overview = service().releases()
    tags = [r.tag for r in overview.index.releases]
    empty = {"tags": tags, "source": source, "target": target, "answer": None, "bump": None, "reasons": []}
    if not source or not target:
        if len(tags) < 2:
            return render_template("diff.html", **empty), 200
        source, target = source or tags[1], target or tags[0]
    try:
        answer = service().compare(source, target)
    except RegistryError as exc:
        # The form again, with what was typed, to correct it.
        return render_template("diff.html", **{**empty, "source": source, "target": target, "problem": exc}), exc.status
    bump, reasons = classify(answer.diff)
    statuses = Counter(change.status for change in answer.diff.changes)
    tally = [f"{statuses[s]} {s}" for s in ("added", "removed", "changed") if statuses[s]]
    return render_template(
        "diff.html",
        tags=tags,
        source=source,
        target=target,
        answer=answer,
        changes=[{"change": change, "templates": _template_pairs(change)} for change in answer.diff.changes],
        tally=", ".join([*tally, f"{answer.diff.unchanged} unchanged"]),
        bump=bump,
        reasons=reasons,
    ), 200


def _template_pairs(change: AgentChange) -> list[dict[str, Any]]:
    """Each template of a changed agent, highlighted before and after."""
    before: dict[str, Any] = (change.definition_from or {}).get("prompt_templates") or {}
    after: dict[str, Any] = (change.definition_to or {}).get("prompt_templates") or {}
    return [
        {
            "role": role,
            "before": highlighted(str(before[role]), "jinja") if role in before else None,
            "after": highlighted(str(after[role]), "jinja") if role in after else None,
            "same": before.get(role) == after.get(role),
        }
        for role in dict.fromkeys([*before, *after])
    ]


# --- tasks of the Agent Protocol service ---------------------------------------------------


@bp.get("/tasks")
def task_list() -> str:
    client = tasks.client(current_app, security.signed_in_token())
    page = max(1, int(request.args.get("page", "1"))) if request.args.get("page", "1").isdigit() else 1
    listing = client.list_tasks(page)
    return render_template("tasks.html", listing=listing, page=page)


@bp.get("/tasks/<task_id>")
def task(task_id: str) -> str:
    client = tasks.client(current_app, security.signed_in_token())
    return render_template("task.html", **client.task_view(task_id))


@bp.get("/tasks/<task_id>/events")
def task_events(task_id: str) -> Response:
    """The task's live events, relayed from the service with the user's token
    for the task page's ``EventSource`` (static/task.js)."""
    client = tasks.client(current_app, security.signed_in_token())
    stream = client.events(task_id, last_event_id=request.headers.get("Last-Event-ID"), after=request.args.get("after"))
    if stream is None:
        return Response(status=204)  # the task is over: the page's EventSource stops
    response = Response(stream, mimetype="text/event-stream")
    response.headers["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the events back
    return response


@bp.post("/tasks/<task_id>/steps")
def task_step(task_id: str) -> Any:
    client = tasks.client(current_app, security.signed_in_token())
    decision = request.form.get("decision")
    additional: dict[str, Any] = {}
    try:
        if decision:
            additional["decision"] = decision
            if request.form.get("reason"):
                additional["reason"] = request.form["reason"]
            if decision == "edit":
                try:
                    additional["arguments"] = json.loads(request.form.get("arguments", ""))
                except ValueError as exc:
                    raise AgentServiceError(f"the edited arguments are not JSON: {exc}", status=422) from exc
        client.step(task_id, additional)
    except AgentServiceError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        # The decision was refused: the task page again, with why, and what was typed.
        view = client.task_view(task_id)
        return render_template("task.html", **view, problem=exc.detail, typed=request.form.get("arguments")), exc.status
    return redirect(url_for("ui.task", task_id=task_id))


@bp.route("/<path:unknown>")
def unknown_page(unknown: str) -> Any:
    """Any other path under /ui: an HTML 404, not the API's problem document."""
    raise NotFound(f"there is no page /ui/{unknown}")


# --- assets ------------------------------------------------------------------------------


@bp.get("/pygments.css")
def stylesheet() -> Response:
    response = Response(pygments_css(), mimetype="text/css")
    response.headers["Cache-Control"] = "public, max-age=3600"
    return response
