"""``create_app``: the Agent Protocol service's WSGI application, wired.

It runs next to the registry, not inside it: agents come through a
``RegistryClient`` (over HTTP, or in process for a local library) and run
on an ``Executor``; both are built by the caller (``prompt-registry agents
serve``, or a test) and handed in. Errors are the registry's RFC 9457
problems, with the protocol's ``message`` member too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from flask import Flask, Response

from registry.client import RegistryClient
from registry.errors import ConfigurationError
from registry.executor import Executor
from registry.format.safeyaml import SAFE_LOADER
from registry.protocol.api import bp
from registry.protocol.service import TaskService
from registry.protocol.store import TaskStore
from registry.protocol.tasklog import LogListener
from registry.runs.engine import RunEngine
from registry.settings import Settings
from registry.web.problems import register_error_handlers

OPENAPI_FILE = Path(__file__).with_name("openapi.yaml")
_MULTIPART_ALLOWANCE = 64 * 1024
"""Room for a multipart body's boundaries and headers around the largest artifact."""


def database_url(settings: Settings) -> str:
    """The configured database, else ``tasks.db`` in the data directory."""
    if settings.agents_database_url:
        return settings.agents_database_url
    if not settings.data_dir:
        raise ConfigurationError(
            "the Agent Protocol service keeps its tasks in a database: give --data-dir or --database-url"
        )
    os.makedirs(settings.data_dir, exist_ok=True)
    return f"sqlite:///{os.path.abspath(os.path.join(settings.data_dir, 'tasks.db'))}"


def create_app(
    settings: Settings,
    *,
    executor: Executor,
    registry: RegistryClient,
    store: TaskStore | None = None,
    listeners: Sequence[LogListener] = (),
) -> Flask:
    """The service over ``settings``' database, running agents from
    ``registry`` on ``executor``; unless ``settings.agents_worker`` is off,
    this process also runs tasks, as a DBOS worker. ``store``: the task
    store of that database when the caller opened it already (for what it
    builds over it too: ``listeners``, told of each change before the first
    task can run here); the application closes it."""
    url = database_url(settings)
    store = store or TaskStore(url)
    engine = RunEngine(url, worker=settings.agents_worker, concurrency=settings.agents_concurrency)
    service = TaskService(
        store,
        executor,
        registry,
        engine,
        default_release=settings.agents_release,
        max_artifact_bytes=settings.agents_max_artifact_bytes,
        step_wait_seconds=settings.agents_step_wait,
        listeners=listeners,
    )
    try:
        service.start()
    except BaseException:
        store.close()
        raise
    app = Flask("registry.protocol", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = (
        max(settings.max_request_bytes, settings.agents_max_artifact_bytes) + _MULTIPART_ALLOWANCE
    )
    app.config["AGENT_PROTOCOL_MAX_JSON_BYTES"] = settings.max_request_bytes
    app.url_map.strict_slashes = False
    app.extensions["agent_protocol.service"] = service
    app.extensions["agent_protocol.tokens"] = (settings.api_tokens, settings.admin_tokens)
    app.register_blueprint(bp)
    register_error_handlers(app, detail_member="message")

    @app.get("/ap/v1/openapi.json")
    def openapi() -> Response:
        return Response(_openapi_json(), mimetype="application/json")

    @app.get("/healthz")
    def healthz() -> Response:
        return Response('{"status": "ok"}', mimetype="application/json")

    def close() -> None:
        service.close()
        store.close()

    app.extensions["agent_protocol.close"] = close
    return app


def openapi_document() -> dict[str, Any]:
    """Our OpenAPI document: the protocol's operations and schemas, and our
    extensions (a fresh copy: a caller may change it)."""
    document: dict[str, Any] = json.loads(_openapi_json())
    return document


@cache
def _openapi_json() -> bytes:
    with OPENAPI_FILE.open(encoding="utf-8") as handle:
        # libyaml's loader where PyYAML has it: a tenth of the pure-Python
        # parse, which every worker's start paid (our own file, read whole).
        return json.dumps(yaml.load(handle, Loader=SAFE_LOADER)).encode("utf-8")
