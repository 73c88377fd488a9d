"""The application factory: all wiring happens here."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from flask import Flask

from registry.api import OPENAPI_KEY, SERVICE_KEY, MalformedAgentPathConverter, bp
from registry.gitstore import GitStore
from registry.problems import register_error_handlers
from registry.rendering import RenderLimits
from registry.safeyaml import YamlLimits
from registry.service import RegistryService
from registry.settings import Settings
from registry.store import Store
from registry.tagmemory import FileTagMemory, InMemoryTagMemory
from registry.worktree import WorktreeStore

OPENAPI_FILE = Path(__file__).resolve().parent / "openapi.yaml"


def open_store(settings: Settings) -> Store:
    """The store the settings name: a git repository, or a directory."""
    if settings.repo:
        memory = FileTagMemory(settings.data_dir) if settings.data_dir else InMemoryTagMemory()
        return GitStore(settings.repo, root=settings.root, channels_file=settings.channels_file, tag_memory=memory)
    return WorktreeStore(settings.served_worktree, root=settings.root)


def build_service(settings: Settings) -> RegistryService:
    """The service over the configured store, with the configured limits."""
    return RegistryService(
        open_store(settings),
        yaml_limits=YamlLimits(max_bytes=settings.max_definition_bytes),
        render_limits=RenderLimits(max_output_bytes=settings.max_render_bytes, max_seconds=settings.max_render_seconds),
    )


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the HTTP API."""
    with OPENAPI_FILE.open(encoding="utf-8") as handle:
        document: dict[str, Any] = yaml.safe_load(handle)
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
    app.extensions[SERVICE_KEY] = build_service(settings)
    app.extensions[OPENAPI_KEY] = openapi_document()
    app.register_blueprint(bp)
    register_error_handlers(app)
    return app
