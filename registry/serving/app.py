"""The application factory: all wiring happens here."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from flask import Flask

from registry.errors import StoreError
from registry.format.safeyaml import YamlLimits
from registry.rendering.sandbox import RenderLimits
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
from registry.serving.bodydeadline import BodyDeadline
from registry.serving.cache import ContentCache, MemoryTier, RedisTier
from registry.serving.events import ReleaseEvents
from registry.serving.metrics import Metrics
from registry.serving.problems import register_error_handlers
from registry.serving.service import RegistryService
from registry.serving.slowlane import SlowLane
from registry.settings import Settings
from registry.store.git import GitStore
from registry.store.mirror import GitMirror, Syncer, SyncError
from registry.store.protocol import Store
from registry.store.tagmemory import FileTagMemory, InMemoryTagMemory
from registry.store.worktree import WorktreeStore

OPENAPI_FILE = Path(__file__).resolve().parent / "openapi.yaml"


def open_mirror(settings: Settings) -> GitMirror | None:
    """The local mirror of the configured remote (created empty if new), or None."""
    if not settings.remote or not settings.data_dir:
        return None
    mirror = GitMirror(settings.remote, Path(settings.data_dir) / "mirror.git")
    try:
        mirror.ensure()
    except SyncError as exc:
        raise StoreError(str(exc)) from exc
    return mirror


def open_store(settings: Settings, mirror: GitMirror | None = None, *, metrics: Metrics | None = None) -> Store:
    """The store the settings name: a repository (or a remote's mirror), or a directory."""
    repository = str(mirror.directory) if mirror is not None else settings.repo
    if repository:
        memory = FileTagMemory(settings.data_dir) if settings.data_dir else InMemoryTagMemory()
        return GitStore(
            repository,
            root=settings.root,
            channels_file=settings.channels_file,
            tag_memory=memory,
            observe_read=metrics.git_read_seconds.observe if metrics is not None else None,
        )
    return WorktreeStore(settings.served_worktree, root=settings.root)


def build_service(settings: Settings) -> RegistryService:
    """The service over the configured store, with the configured limits.

    With a remote, the service has a ``Syncer``, and with a Redis too, the
    ``ReleaseEvents`` that connect it to other replicas; ``service.start()``
    starts them.
    """
    metrics = Metrics()
    mirror = open_mirror(settings)
    syncer = None
    if mirror is not None and settings.data_dir:
        syncer = Syncer(
            mirror,
            interval=settings.sync_interval,
            data_dir=settings.data_dir,
            failing_limit=settings.sync_failing_limit,
        )
    shared = None
    if settings.redis_url:
        shared = RedisTier(
            settings.redis_url, prefix=settings.redis_prefix, timeout=settings.redis_timeout, metrics=metrics
        )
    return RegistryService(
        open_store(settings, mirror, metrics=metrics),
        syncer=syncer,
        content=ContentCache(MemoryTier(settings.cache_entries), shared, metrics),
        events=ReleaseEvents(shared, metrics=metrics) if shared is not None and syncer is not None else None,
        metrics=metrics,
        # A waiting long-poll holds a thread under gthread, but only a socket
        # and a greenlet under gevent: either way, at most half of what a
        # worker can serve at once waits.
        long_poll_slots=max(1, (settings.connections if settings.worker_class == "gevent" else settings.threads) // 2),
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
    service = build_service(settings)
    service.start()
    app.extensions[SERVICE_KEY] = service
    app.extensions[SETTINGS_KEY] = settings
    app.config["REGISTRY_WEBHOOK_SECRET"] = settings.webhook_secret
    document = app.extensions[OPENAPI_KEY] = openapi_document()
    app.register_blueprint(bp)
    app.register_blueprint(apidocs.bp)
    # After every route is registered: each takes the query parameters the document gives it.
    app.extensions[QUERY_PARAMETERS_KEY] = declared_query_parameters(app.url_map.iter_rules(), document)
    register_error_handlers(app)
    app.wsgi_app = BodyDeadline(  # type: ignore[method-assign]
        SlowLane(app.wsgi_app), seconds=settings.body_seconds, max_bytes=settings.max_request_bytes
    )
    return app
