"""Running the Agent Protocol service under gunicorn.

A step runs a model round within its request, for as long as the model
takes: the workers are threads (gthread), each request holding one, and
every worker process builds its own application after the fork (its own
database connections, executor loop and MCP sessions). Any number of
workers and replicas may share one database: a task's steps never overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from flask import Flask
from gunicorn.app.base import BaseApplication

from registry.settings import Settings
from registry.web.server import gunicorn_options


class AgentProtocolServer(BaseApplication):
    """gunicorn serving the application ``build`` makes, in each worker."""

    def __init__(self, settings: Settings, build: Callable[[], Flask]) -> None:
        self._settings = settings
        self._build = build
        super().__init__()

    def load_config(self) -> None:
        options = gunicorn_options(replace(self._settings, worker_class="gthread"))
        # A step lasts as long as its model round: the worker's heartbeat
        # runs beside its requests, and the model call has its own timeout.
        options.update(proc_name="prompt-registry-agents", timeout=0, graceful_timeout=30)
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:  # type: ignore[override]  # gunicorn's stubs want environ a MutableMapping, Flask takes a dict
        return self._build()
