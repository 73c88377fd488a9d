"""Running the Agent Protocol service under gunicorn.

The workers are uvicorn's (``uvicorn_worker.UvicornWorker``): each runs an
event loop that serves live task events (a subscriber is a coroutine, not
a thread) and hands the Flask routes to a2wsgi's thread pools, where a step
runs its model round within its request (``registry.protocol.asgi``). Every
worker process builds its own application after the fork (its own
database connections, executor loop, MCP sessions and event hub). Any
number of workers and replicas may share one database: a task's steps
never overlap, and each hub follows the database, so a subscriber sees
what any process appends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gunicorn.app.base import BaseApplication
from starlette.applications import Starlette

from registry.settings import Settings
from registry.web.server import gunicorn_options

WORKER_CLASS = "uvicorn_worker.UvicornWorker"


class AgentProtocolServer(BaseApplication):
    """gunicorn serving the application ``build`` makes, in each worker."""

    def __init__(self, settings: Settings, build: Callable[[], Starlette]) -> None:
        self._settings = settings
        self._build = build
        super().__init__()

    def load_config(self) -> None:
        options = gunicorn_options(replace(self._settings, worker_class="gthread"))
        # gunicorn's hooks around each request and its thread count are its
        # own workers'; uvicorn's serves requests itself (a2wsgi's pools are
        # sized by settings.threads).
        for key in ("threads", "pre_request"):
            options.pop(key)
        # The event loop tells gunicorn it is alive while steps run in
        # threads beside it, so a worker whose loop hangs is replaced; a
        # shutdown lets running steps end, and closes live streams at once.
        options.update(worker_class=WORKER_CLASS, proc_name="prompt-registry-agents", timeout=30, graceful_timeout=30)
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Starlette:
        return self._build()
