"""Running the application under gunicorn, the production WSGI server.

Each worker process builds its own application (and so its own git
connection): nothing that holds a subprocess or a lock is shared across a
fork. Threads within a worker share the application, which is thread-safe.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from registry.app import create_app
from registry.settings import Settings


def bind_address(host: str, port: int) -> str:
    """gunicorn's bind syntax, bracketing IPv6 addresses."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class RegistryServer(BaseApplication):  # type: ignore[misc]
    """gunicorn with gthread workers, configured from ``Settings``."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        options: dict[str, Any] = {
            "bind": bind_address(self._settings.host, self._settings.port),
            "workers": self._settings.workers,
            "threads": self._settings.threads,
            "worker_class": "gthread",
            "loglevel": self._settings.log_level,
            "accesslog": "-",
            "errorlog": "-",
            "graceful_timeout": 10,
            "timeout": 30,
            "proc_name": "prompt-registry",
            # One well-known control socket per user would clash between
            # several registries on one machine; we manage by signals.
            "control_socket_disable": True,
        }
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self._settings)
