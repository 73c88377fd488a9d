"""Building the service from settings, without the web stack.

The server's ``create_app`` and every command of the CLI open the service
here, so that a command reading a checkout imports no Flask, Werkzeug or
gunicorn, and a store, a mirror and a Redis are opened (and closed) the
same way everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from registry.errors import StoreError
from registry.format.safeyaml import YamlLimits
from registry.rendering import RenderLimits
from registry.serving.cache import ContentCache, MemoryTier, RedisTier
from registry.serving.events import ReleaseEvents
from registry.serving.metrics import Metrics
from registry.serving.service import RegistryService
from registry.settings import Settings
from registry.store.git import GitStore
from registry.store.mirror import GitMirror, Syncer, SyncError
from registry.store.protocol import Store
from registry.store.tagmemory import FileTagMemory, InMemoryTagMemory
from registry.store.worktree import WorktreeStore


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
    starts them. The caller closes it (``open_service`` does).
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


@contextmanager
def open_service(settings: Settings) -> Iterator[RegistryService]:
    """The service for one command: built, not started (no background
    fetching, no announcements), and closed when the block ends."""
    service = build_service(settings)
    try:
        yield service
    finally:
        service.close()
