"""The application factory: the Flask application around the service.

The service itself is built by ``registry.serving.wiring``, which the CLI
uses too; ``build_service`` is also importable from here, as before.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from flask import Flask

from registry.format.safeyaml import SAFE_LOADER
from registry.rendering import pausing
from registry.serving import apidocs
from registry.serving.api import (
    OPENAPI_KEY,
    QUERY_PARAMETERS_KEY,
    SERVICE_KEY,
    SETTINGS_KEY,
    MalformedAgentPathConverter,
    bp,
    declared_query_parameters,
)
from registry.serving.ui import views as ui
from registry.serving.wiring import build_service
from registry.settings import Settings
from registry.web.bodydeadline import BodyDeadline
from registry.web.problems import register_error_handlers
from registry.web.slowlane import SlowLane

OPENAPI_FILE = Path(__file__).resolve().parent / "openapi.yaml"


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the HTTP API."""
    with OPENAPI_FILE.open(encoding="utf-8") as handle:
        document: dict[str, Any] = yaml.load(handle, Loader=SAFE_LOADER)
    return document


def create_app(settings: Settings | None = None) -> Flask:
    """Build the Flask application; settings default to the environment's."""
    settings = settings or Settings.from_env()
    app = Flask("registry", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    # Werkzeug would answer "//" with an HTML redirect; every answer here is JSON.
    app.url_map.merge_slashes = False
    app.url_map.converters["malformed_agent_path"] = MalformedAgentPathConverter
    app.json.sort_keys = False  # type: ignore[attr-defined]  # definitions keep their key order
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    service = build_service(settings)
    service.start()
    app.extensions[SERVICE_KEY] = service
    app.extensions[SETTINGS_KEY] = settings
    document = app.extensions[OPENAPI_KEY] = openapi_document()
    app.register_blueprint(bp)
    app.register_blueprint(apidocs.bp)
    ui.install(app, settings)
    # After every route is registered: each takes the query parameters the document gives it.
    app.extensions[QUERY_PARAMETERS_KEY] = declared_query_parameters(app.url_map.iter_rules(), document)
    register_error_handlers(app)
    app.wsgi_app = BodyDeadline(  # type: ignore[method-assign]
        SlowLane(app.wsgi_app, pausing=pausing), seconds=settings.body_seconds, max_bytes=settings.max_request_bytes
    )
    return app
