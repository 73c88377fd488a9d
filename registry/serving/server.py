"""``prompt-registry serve``'s server: gunicorn serving ``create_app``.

The workers, options, hooks and access log are the ones both services share
(``registry.web.server``); this is the registry's application under them.
"""

from __future__ import annotations

from flask import Flask
from gunicorn.app.base import BaseApplication

from registry.serving.app import create_app
from registry.settings import Settings
from registry.web.server import gunicorn_options


class RegistryServer(BaseApplication):
    """gunicorn configured from ``Settings``, serving ``create_app``."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in gunicorn_options(self._settings).items():
            self.cfg.set(key, value)

    def load(self) -> Flask:  # type: ignore[override]  # gunicorn's stubs want environ a MutableMapping, Flask takes a dict
        return create_app(self._settings)
