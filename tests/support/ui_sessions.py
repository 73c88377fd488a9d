"""Shared by the UI sessions' tests: the workers of one server (apps over the
example with one token and one UI secret), signing in and out, and a temporary
directory another user could write to."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.serving.app import create_app
from registry.settings import Settings
from tests.support.ui_pages import csrf, page

TOKEN = "ui-token-0123456789abcdef"
COOKIE = "prompt_registry_ui"
SECRET = "the-ui-secret-of-every-worker-0123456789"


@contextmanager
def workers_over(example: Path) -> Iterator[Any]:
    """``workers(**settings)``: apps over the example with tokens and one UI
    secret, as the workers of one server are; closed at the end."""
    made: list[Flask] = []

    def make(**settings: Any) -> Flask:
        app = create_app(Settings(repo=str(example), api_tokens=(TOKEN,), ui_secret=SECRET, **settings))
        made.append(app)
        return app

    yield make
    for app in made:
        app.extensions["prompt_registry.service"].close()


def signed_in(client: FlaskClient) -> str:
    """Signs ``client`` in; the session cookie's value."""
    form = page(client, "/ui/login")
    response = client.post("/ui/login", data={"csrf_token": csrf(form), "token": TOKEN})
    assert response.status_code == 302, response.get_data(as_text=True)[:500]
    cookie = client.get_cookie(COOKIE, path="/ui")
    assert cookie is not None
    return cookie.value


def sign_out(client: FlaskClient) -> None:
    form = page(client, "/ui/")
    assert client.post("/ui/logout", data={"csrf_token": csrf(form)}).status_code == 302


def with_cookie(app: Flask, value: str) -> FlaskClient:
    client = app.test_client()
    client.set_cookie(COOKIE, value, path="/ui")
    return client


def opens(client: FlaskClient) -> bool:
    """Whether the client's session lets it read a page (rather than being sent to sign in)."""
    response = client.get("/ui/agents")
    assert response.status_code in (200, 302)
    return response.status_code == 200


def make_hostile_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory where another user (anyone) may write the UI's
    directory, as on a shared machine; this process's ``tempfile`` uses it."""
    directory = tmp_path / f"prompt-registry-ui-{os.getuid()}"
    directory.mkdir()
    directory.chmod(0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path
