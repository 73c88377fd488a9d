"""The HTTP API's query parameters: misspelt, unknown and repeated ones are
refused, and every documented one is read by its route."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.serving.app import openapi_document
from registry.settings import Settings
from tests.conftest import LibraryRepo, make_app
from tests.support.openapi_check import problem, validate_against_openapi

# --- query parameters ----------------------------------------------------------

ADMIN_TOKEN = "admin-token-0123456789abcdef"
# A value for each path variable of any route, and a valid value for each query parameter.
_PATH_VALUES = {"usecase": "chat", "name": "minimal", "slug": "not-found", "version": "0", "filename": "x.css"}
_VALID_QUERY = {"release": "v1.1.0", "from": "v1.0.0", "to": "v1.1.0"}
_BODIES: dict[str, Any] = {"renderAgent": {"inputs": {"question": "q"}}, "parseOutput": {"output": "hi"}}


def _concrete(template: str) -> str:
    """A real URL for an OpenAPI path template or a Flask rule."""
    return re.sub(r"[{<](?:[^:{}<>]+:)?([^{}<>]+)[}>]", lambda m: _PATH_VALUES[m.group(1)], template)


@pytest.fixture
def admin_app(released_repo: LibraryRepo) -> Iterator[Flask]:
    application = make_app(Settings(repo=str(released_repo.path), admin_tokens=(ADMIN_TOKEN,)))
    yield application
    application.extensions["prompt_registry.service"].close()


def test_a_misspelt_release_is_refused_with_a_hint_instead_of_serving_latest(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/minimal?relase=v1.0.0")
    body = problem(response, 400, "invalid-request")
    assert body["parameter"] == "relase"
    assert "unknown query parameter 'relase'" in body["detail"]
    assert "did you mean 'release'?" in body["detail"]
    assert "X-Registry-Release" not in response.headers
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)


def test_an_unknown_parameter_with_no_close_match_names_what_the_route_takes(client: FlaskClient) -> None:
    body = problem(client.get("/v1/diff?from=v1.0.0&to=v1.1.0&colour=red"), 400, "invalid-request")
    assert body["parameter"] == "colour"
    assert "did you mean" not in body["detail"] and "'from'" in body["detail"] and "'to'" in body["detail"]
    body = problem(client.get("/healthz?verbose=1"), 400, "invalid-request")
    assert "takes no query parameters" in body["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "/v1/diff?from=v1.0.0&from=v1.1.0&to=v1.1.0",
        "/v1/agents/chat/minimal?release=v1.0.0&release=v1.0.0",
        "/v1/bundle?release=v1.0.0&release=",
    ],
)
def test_a_repeated_parameter_is_refused_even_with_equal_values(client: FlaskClient, url: str) -> None:
    body = problem(client.get(url), 400, "invalid-request")
    assert body["parameter"] in ("from", "release")
    assert "more than once" in body["detail"]


def test_every_route_refuses_an_unknown_query_parameter(admin_app: Flask) -> None:
    client = admin_app.test_client()
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    checked = 0
    for rule in admin_app.url_map.iter_rules():
        if rule.endpoint == "api.malformed_agent_path":
            continue  # answers every request with its own invalid-request
        if rule.rule.startswith("/ui"):
            continue  # pages answer HTML; tests/serving/ui/test_ui.py checks their parameters
        for method in sorted(rule.methods or ()):
            response = client.open(_concrete(rule.rule) + "?relase=v1.0.0", method=method, headers=headers)
            assert response.status_code == 400, (method, rule.rule, response.status_code)
            if method != "HEAD":
                body = problem(response, 400, "invalid-request")
                assert body["parameter"] == "relase", (method, rule.rule)
            checked += 1
    assert checked >= 40


def test_every_documented_query_parameter_is_accepted_and_read_by_its_route(admin_app: Flask) -> None:
    """Each route accepts exactly what registry/serving/openapi.yaml declares: valid values answer 2xx,
    and an empty value for any one parameter is refused naming it, so the view reads it."""
    client = admin_app.test_client()
    document = openapi_document()
    declared = 0
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            parameters = [
                _resolve(document, p) for p in [*item.get("parameters", []), *operation.get("parameters", [])]
            ]
            names = [p["name"] for p in parameters if p["in"] == "query"]
            body = _BODIES.get(operation["operationId"])
            url = _concrete(template)
            if not names:
                continue
            valid = client.open(url, method=method.upper(), query_string={n: _VALID_QUERY[n] for n in names}, json=body)
            assert 200 <= valid.status_code < 300, (template, valid.get_data(as_text=True))
            for name in names:
                query = {**{n: _VALID_QUERY[n] for n in names}, name: ""}
                refused = client.open(url, method=method.upper(), query_string=query, json=body)
                assert problem(refused, 400, "invalid-request").get("parameter") == name, (template, name)
                declared += 1
    assert declared >= 7


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in item:
        return item
    resolved: dict[str, Any] = document
    for part in item["$ref"].removeprefix("#/").split("/"):
        resolved = resolved[part]
    return resolved
