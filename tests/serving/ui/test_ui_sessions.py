"""The UI's sign-in sessions (registry/serving/ui/sessions.py): the token is
never readable in the cookie, a session expires, and a signed-out cookie sent
again opens nothing, in any worker that may receive it (a shared directory;
a real Redis: tests/integration/test_ui_sessions_processes.py)."""

from __future__ import annotations

import base64
import json
import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from registry.serving.app import create_app
from registry.serving.ui.sessions import LIFETIME, DirectorySignedOut, UiSessions
from registry.settings import Settings
from tests.support.ui_pages import csrf, page
from tests.support.ui_sessions import (
    SECRET,
    TOKEN,
    make_hostile_tmp,
    opens,
    sign_out,
    signed_in,
    with_cookie,
    workers_over,
)


@pytest.fixture
def workers(example: Path) -> Iterator[Any]:
    with workers_over(example) as make:
        yield make


@pytest.fixture
def hostile_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_hostile_tmp(tmp_path, monkeypatch)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_sign_out_store_is_made_at_the_first_sign_in_not_with_the_app(
    workers: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    app = workers()
    client = app.test_client()
    page(client, "/ui/login")
    assert list(tmp_path.iterdir()) == []
    value = signed_in(client)
    assert (tmp_path / f"prompt-registry-ui-{os.getuid()}").is_dir()
    sign_out(client)
    assert not opens(with_cookie(app, value))


def test_an_app_without_tokens_never_makes_a_sign_out_store(example: Path, hostile_tmp: Path) -> None:
    app = create_app(Settings(repo=str(example), ui_secret=SECRET))
    try:
        client = app.test_client()
        form = page(client, "/ui/agents/explain_code/snippet")
        assert client.post("/ui/logout", data={"csrf_token": csrf(form)}).status_code == 302
        assert list((hostile_tmp / f"prompt-registry-ui-{os.getuid()}").iterdir()) == []
    finally:
        app.extensions["prompt_registry.service"].close()


@pytest.mark.parametrize("place", ["another user's temporary directory", "a data dir whose sign-outs are a file"])
def test_a_sign_out_store_that_cannot_be_made_fails_only_signing_in_and_logs_why(
    workers: Any, hostile_tmp: Path, tmp_path_factory: pytest.TempPathFactory, place: str
) -> None:
    data = tmp_path_factory.mktemp("data")
    unusable = data / "ui-signed-out"
    unusable.write_text("not a directory", encoding="utf-8")
    app = workers(**({"data_dir": str(data)} if place.startswith("a data dir") else {}))
    answered = app.test_client().get("/v1/releases", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answered.status_code == 200
    client = app.test_client()
    form = page(client, "/ui/login")
    refused = client.post("/ui/login", data={"csrf_token": csrf(form), "token": TOKEN})
    assert refused.status_code == 503
    shown = refused.get_data(as_text=True)
    assert "Signing in is out of service" in shown and "log says why" in shown
    assert str(data) not in shown and "/tmp" not in shown and str(hostile_tmp) not in shown  # no server path
    assert not opens(client)
    # A cookie another worker sealed, sent to this one: the login page, and a page that says why (not a 500).
    value = signed_in(workers(data_dir=str(tmp_path_factory.mktemp("data"))).test_client())
    assert with_cookie(app, value).get("/ui/login").status_code == 200
    elsewhere = with_cookie(app, value).get("/ui/agents")
    assert elsewhere.status_code == 503 and "Signing in is out of service" in elsewhere.get_data(as_text=True)


def test_the_session_cookie_never_holds_the_token(workers: Any) -> None:
    app = workers()
    value = signed_in(app.test_client())
    decoded = app.session_interface.get_signing_serializer(app).loads(value)
    assert TOKEN not in json.dumps(decoded)
    payload = value.split(".")[1] if value.startswith(".") else value.split(".")[0]
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    assert TOKEN.encode() not in (zlib.decompress(raw) if value.startswith(".") else raw)
    assert opens(with_cookie(app, value))


def test_a_signed_out_cookie_sent_again_opens_nothing(workers: Any) -> None:
    app = workers()
    client = app.test_client()
    value = signed_in(client)
    sign_out(client)
    assert not opens(client)
    assert not opens(with_cookie(app, value))


@pytest.mark.parametrize("shared", ["data_dir", "temporary directory"])
def test_a_sign_out_in_one_worker_holds_in_the_others(workers: Any, tmp_path: Path, shared: str) -> None:
    settings = {"data_dir": str(tmp_path)} if shared == "data_dir" else {}
    one, other = workers(**settings), workers(**settings)
    client = one.test_client()
    value = signed_in(client)
    assert opens(with_cookie(other, value))
    sign_out(client)
    assert not opens(with_cookie(other, value))


def test_a_cookie_made_with_another_secret_opens_nothing(workers: Any, example: Path) -> None:
    value = signed_in(workers().test_client())
    stranger = create_app(Settings(repo=str(example), api_tokens=(TOKEN,), ui_secret="another-secret-0123456789"))
    try:
        assert not opens(with_cookie(stranger, value))
    finally:
        stranger.extensions["prompt_registry.service"].close()


def test_a_session_expires_after_its_lifetime(tmp_path: Path) -> None:
    clock = Clock()
    sessions = UiSessions(SECRET, DirectorySignedOut(tmp_path), clock=clock)
    sealed = sessions.seal(TOKEN)
    assert TOKEN not in sealed
    clock.now += LIFETIME - 1
    opened = sessions.open(sealed)
    assert opened is not None and opened.token == TOKEN
    clock.now += 2
    assert sessions.open(sealed) is None


def test_a_revoked_session_stays_revoked_and_its_record_goes_once_it_has_expired(tmp_path: Path) -> None:
    clock = Clock()
    sessions = UiSessions(SECRET, DirectorySignedOut(tmp_path, clock=clock), clock=clock)
    first = sessions.seal(TOKEN)
    sessions.revoke(first)
    assert sessions.open(first) is None
    [record] = tmp_path.iterdir()
    clock.now += LIFETIME + 10
    os.utime(record, (clock.now - LIFETIME - 5, clock.now - LIFETIME - 5))  # written when the clock says
    sessions.revoke(sessions.seal(TOKEN))
    assert record.name not in {p.name for p in tmp_path.iterdir()} and len(list(tmp_path.iterdir())) == 1
    assert sessions.open(first) is None  # expired anyway


@pytest.mark.parametrize("sealed", ["", "not-fernet", "gAAAAA" + "A" * 80, "é"])
def test_a_session_value_that_is_not_ours_opens_nothing(tmp_path: Path, sealed: str) -> None:
    assert UiSessions(SECRET, DirectorySignedOut(tmp_path)).open(sealed) is None
