"""The Agent Protocol v1 over HTTP: ``/ap/v1/agent/...``, exactly as the
protocol's OpenAPI document gives it, plus our documented extensions
(``/cancel``, ``/actions``, and extra members of Task, Step and Artifact).

A view parses the request, calls one ``TaskService`` method and writes the
protocol's JSON. Pagination is strict: ``current_page`` and ``page_size``
are whole numbers from 1; a ``page_size`` above ``MAX_PAGE_SIZE`` is
answered with that many (the ``pagination`` member says so).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from flask import Blueprint, Response, current_app, g, request

from registry.errors import InvalidRequest, PayloadTooLarge, Unauthorized
from registry.protocol.records import ArtifactRecord, StepRecord, TaskRecord
from registry.protocol.service import Caller, Page, TaskService
from registry.web.auth import bearer_token, token_matches

bp = Blueprint("agent_protocol", __name__, url_prefix="/ap/v1/agent")

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 10
MAX_ARTIFACTS_LISTED = 1000
"""How many of a task's artifacts a task or a step answer lists (GET .../artifacts pages through all)."""
_MAX_PAGE = 2**31 - 1
# The protocol's Step.status has three values; a step that failed is
# ``completed`` there, with additional_output.state "failed".
_PROTOCOL_STEP_STATUS = {"created": "created", "running": "running", "completed": "completed", "failed": "completed"}


def service() -> TaskService:
    found: TaskService = current_app.extensions["agent_protocol.service"]
    return found


@bp.before_request
def identify() -> None:
    """Who calls (``caller_for``)."""
    g.caller = caller_for(request.headers.get("Authorization", ""), current_app.extensions["agent_protocol.tokens"])


def caller_for(authorization: str, tokens: tuple[tuple[str, ...], tuple[str, ...]]) -> Caller:
    """Who sends a request with this ``Authorization`` header, given the
    service's ``(api_tokens, admin_tokens)``: a token's owner when the
    service has tokens (``Unauthorized`` without a valid one), else anyone
    (``anonymous``). Every route of the service, Flask's or not, asks this."""
    api_tokens, admin_tokens = tokens
    if not api_tokens and not admin_tokens:
        return Caller.for_token(None)
    token = bearer_token(authorization)
    if token_matches(token, admin_tokens):
        return Caller.for_token(token, admin=True)
    if token_matches(token, api_tokens):
        return Caller.for_token(token)
    raise Unauthorized("the bearer token is not valid", bearer=True)


def caller() -> Caller:
    found: Caller = g.caller
    return found


# --- tasks -------------------------------------------------------------------------------


@bp.post("/tasks")
def create_task() -> Response:
    _only_query()
    task = service().create_task(caller(), _json_body())
    return _json(task_json(task, []))


@bp.get("/tasks")
def list_tasks() -> Response:
    page = _page()
    tasks, total = service().list_tasks(caller(), page)
    return _json({"tasks": [task_json(t, None) for t in tasks], "pagination": _pagination(page, total)})


@bp.get("/tasks/<task_id>")
def get_task(task_id: str) -> Response:
    _only_query()
    task = service().get_task(caller(), task_id)
    artifacts, _ = service().list_artifacts(caller(), task_id, Page(1, MAX_ARTIFACTS_LISTED))
    return _json(task_json(task, artifacts))


@bp.post("/tasks/<task_id>/cancel")
def cancel_task(task_id: str) -> Response:
    _only_query()
    return _json(task_json(service().cancel_task(caller(), task_id), None))


@bp.get("/tasks/<task_id>/actions")
def list_actions(task_id: str) -> Response:
    _only_query()
    actions = service().actions(caller(), task_id)
    return _json(
        {
            "actions": [
                {
                    "action_id": a.action_id,
                    "step_id": a.step_id,
                    "status": a.status,
                    "agent": a.agent,
                    "tool": a.tool,
                    "arguments": a.arguments,
                    "thought": a.thought,
                    "decided_by_step_id": a.decided_by_step_id,
                    "reason": a.reason,
                    "edited_arguments": a.edited_arguments,
                    "created_at": a.created_at.isoformat(),
                }
                for a in actions
            ]
        }
    )


# --- steps -------------------------------------------------------------------------------


@bp.post("/tasks/<task_id>/steps")
def execute_step(task_id: str) -> Response:
    _only_query()
    step = service().execute_step(caller(), task_id, _json_body())
    return _json(step_json(step, service().step_artifacts(task_id, step.step_id)))


@bp.get("/tasks/<task_id>/steps")
def list_steps(task_id: str) -> Response:
    page = _page()
    steps, total = service().list_steps(caller(), task_id, page)
    # The task's artifacts read once for the page, not once per step.
    artifacts, _ = service().list_artifacts(caller(), task_id, Page(1, MAX_ARTIFACTS_LISTED))
    by_step: dict[str | None, list[ArtifactRecord]] = {}
    for artifact in artifacts:
        by_step.setdefault(artifact.step_id, []).append(artifact)
    return _json(
        {
            "steps": [step_json(s, by_step.get(s.step_id, [])) for s in steps],
            "pagination": _pagination(page, total),
        }
    )


@bp.get("/tasks/<task_id>/steps/<step_id>")
def get_step(task_id: str, step_id: str) -> Response:
    _only_query()
    step = service().get_step(caller(), task_id, step_id)
    return _json(step_json(step, service().step_artifacts(task_id, step_id)))


# --- artifacts ---------------------------------------------------------------------------


@bp.get("/tasks/<task_id>/artifacts")
def list_artifacts(task_id: str) -> Response:
    page = _page()
    artifacts, total = service().list_artifacts(caller(), task_id, page)
    return _json({"artifacts": [artifact_json(a) for a in artifacts], "pagination": _pagination(page, total)})


@bp.post("/tasks/<task_id>/artifacts")
def upload_artifact(task_id: str) -> Response:
    _only_query()
    upload = request.files.get("file")
    if upload is None:
        raise InvalidRequest("send the file as the multipart/form-data part 'file'")
    relative_path = request.form.get("relative_path")
    limit: int = service().max_artifact_bytes
    data = upload.stream.read(limit + 1)
    artifact = service().upload_artifact(
        caller(),
        task_id,
        file_name=upload.filename or "",
        data=data,
        content_type=upload.mimetype if upload.content_type else None,
        relative_path=relative_path,
    )
    return _json(artifact_json(artifact))


@bp.get("/tasks/<task_id>/artifacts/<artifact_id>")
def download_artifact(task_id: str, artifact_id: str) -> Response:
    _only_query()
    artifact, data = service().artifact(caller(), task_id, artifact_id)
    # Always octet-stream, as the protocol says: a browser must not render
    # an uploaded file as a page of this origin.
    response = Response(data, mimetype="application/octet-stream")
    response.headers["Content-Disposition"] = f"attachment; filename*=UTF-8''{quote(artifact.file_name)}"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Artifact-Content-Type"] = artifact.content_type
    return response


# --- JSON --------------------------------------------------------------------------------


def task_json(task: TaskRecord, artifacts: list[ArtifactRecord] | None) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "input": task.input,
        "additional_input": task.additional_input,
        "artifacts": [artifact_json(a) for a in artifacts or []],
        "status": task.status,
        "agent": task.agent,
        "release": {"requested": task.release_requested, "tag": task.release_tag, "commit": task.release_commit},
        "digest": task.digest,
        "outcome": task.outcome,
        "output": task.output,
        "error": task.error,
        "steps": task.steps,
        "mode": task.mode,
        "created_at": task.created_at.isoformat(),
        "updated_at": task.updated_at.isoformat(),
    }


def step_json(step: StepRecord, artifacts: list[ArtifactRecord]) -> dict[str, Any]:
    additional = dict(step.additional_output or {})
    additional.setdefault("state", step.status)
    return {
        "task_id": step.task_id,
        "step_id": step.step_id,
        "name": step.name or f"step {step.number}",
        "status": _PROTOCOL_STEP_STATUS[step.status],
        "input": step.input,
        "additional_input": step.additional_input,
        "output": step.output,
        "additional_output": additional,
        "artifacts": [artifact_json(a) for a in artifacts],
        "is_last": step.is_last,
        "number": step.number,
        "worker": step.worker,
        "created_at": step.created_at.isoformat(),
    }


def artifact_json(artifact: ArtifactRecord) -> dict[str, Any]:
    return {
        "artifact_id": artifact.artifact_id,
        "agent_created": artifact.agent_created,
        "file_name": artifact.file_name,
        "relative_path": artifact.relative_path,
        "content_type": artifact.content_type,
        "size": artifact.size,
        "sha256": artifact.sha256,
        "step_id": artifact.step_id,
        "created_at": artifact.created_at.isoformat(),
    }


def _json(body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), mimetype="application/json")


def _json_body() -> dict[str, Any]:
    # The app's limit leaves room for artifacts; a JSON body gets the registry's.
    limit: int = current_app.config["AGENT_PROTOCOL_MAX_JSON_BYTES"]
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"a JSON body may hold at most {limit} bytes")
    raw = request.stream.read(limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge(f"a JSON body may hold at most {limit} bytes")
    if not raw.strip(b" \t\r\n"):
        if raw:
            raise InvalidRequest("the body is blank: send a JSON object, or nothing")
        return {}  # the protocol's bodies are optional; its client sends none
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def _only_query(*allowed: str) -> None:
    for name in request.args:
        if name not in allowed:
            raise InvalidRequest(f"unknown query parameter {name!r}", parameter=name)
    for name in allowed:
        if len(request.args.getlist(name)) > 1:
            raise InvalidRequest(f"query parameter {name!r} is given twice", parameter=name)


def _page() -> Page:
    _only_query("current_page", "page_size")
    number = _whole(request.args.get("current_page"), "current_page", 1)
    size = _whole(request.args.get("page_size"), "page_size", DEFAULT_PAGE_SIZE)
    return Page(number, min(size, MAX_PAGE_SIZE))


def _whole(raw: str | None, name: str, default: int) -> int:
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 10 or not 1 <= int(raw) <= _MAX_PAGE:
        raise InvalidRequest(f"{name} must be a whole number from 1 to {_MAX_PAGE}", parameter=name)
    return int(raw)


def _pagination(page: Page, total: int) -> dict[str, int]:
    return {
        "total_items": total,
        "total_pages": -(-total // page.size),
        "current_page": page.number,
        "page_size": page.size,
    }
