"""Errors become RFC 9457 problems in one place, and nothing else leaks."""

from __future__ import annotations

import logging
from typing import NoReturn

import pytest
from flask import Flask
from werkzeug.exceptions import MethodNotAllowed

from registry.errors import InvalidInputs, ReleaseNotFound
from registry.models import Issue
from registry.web.problems import register_error_handlers


@pytest.fixture
def app() -> Flask:
    application = Flask("problems-test")
    register_error_handlers(application)

    @application.get("/release")
    def release() -> NoReturn:
        raise ReleaseNotFound("release 'v9' does not exist", requested="v9", available=["v1.0.0"])

    @application.get("/inputs")
    def inputs() -> NoReturn:
        raise InvalidInputs("2 problems", [Issue("missing required input 'q'", "/q"), Issue("bad \ud800", "/x")])

    @application.get("/unordered")
    def unordered() -> NoReturn:
        # Werkzeug lists a route's methods from a set, in an order that
        # depends on the process's hash seed; this is one such order.
        raise MethodNotAllowed(valid_methods=["POST", "OPTIONS", "GET", "HEAD"])

    @application.get("/boom")
    def boom() -> NoReturn:
        raise RuntimeError("/srv/secret/path exploded")

    return application


def test_registry_errors_become_problems_with_their_members(app: Flask) -> None:
    response = app.test_client().get("/release")
    assert response.status_code == 404
    assert response.mimetype == "application/problem+json"
    assert response.get_json(force=True) == {
        "type": "/problems/release-not-found",
        "title": "Release not found",
        "status": 404,
        "detail": "release 'v9' does not exist",
        "requested": "v9",
        "available": ["v1.0.0"],
    }


def test_issue_lists_are_serialised_even_with_unencodable_text(app: Flask) -> None:
    body = app.test_client().get("/inputs").get_json(force=True)
    assert [e["path"] for e in body["errors"]] == ["/q", "/x"]


def test_an_unexpected_error_is_a_bare_500_that_is_logged(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        response = app.test_client().get("/boom")
    assert response.status_code == 500
    body = response.get_json(force=True)
    assert body["type"] == "/problems/internal-error"
    assert "secret" not in response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)
    assert any("unexpected error" in record.message for record in caplog.records)


def test_werkzeug_errors_are_problems_too(app: Flask) -> None:
    response = app.test_client().get("/nowhere")
    assert response.get_json(force=True)["type"] == "/problems/not-found"
    response = app.test_client().post("/release")
    assert response.get_json(force=True)["type"] == "/problems/method-not-allowed"
    assert "GET" in response.headers["Allow"]


def test_allow_lists_the_methods_sorted_whatever_order_werkzeug_gives(app: Flask) -> None:
    response = app.test_client().get("/unordered")
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD, OPTIONS, POST"
