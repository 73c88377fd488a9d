"""Hostile definitions found in review, through the HTTP API: each is one
file's problem, never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.conftest import LibraryRepo, client_for
from tests.support.openapi_check import problem

# --- hostile definitions found in review: each is one file's problem, never a 500 ------------


def _definition_with_inputs(inputs: dict[str, Any], template: str = "{{ x }}") -> str:
    return json.dumps({"name": "Agent", "prompt_templates": {"user": template}, "inputs": inputs})


def test_a_remote_ref_in_inputs_is_refused_without_any_request(repo: LibraryRepo) -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/x.json"
        inputs = {"type": "object", "properties": {"x": {"$ref": url}}}
        client = client_for(repo.release("v1.0.0", {"a/ssrf.yml": _definition_with_inputs(inputs)}))
        body = problem(client.post("/v1/agents/a/ssrf/render", json={"inputs": {"x": 1}}), 422, "invalid-definition")
        assert body["errors"][0]["path"] == "/inputs/properties/x/$ref"
        with pytest.raises(TimeoutError):
            listener.accept()


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
        ({"type": "object", "properties": {"x": {"$ref": "other.json"}}}, "only references inside"),
        ({"type": "object", "properties": {"x": {"$id": "http://x/", "type": "string"}}}, "$id"),
        ({"type": "object", "properties": {"x": {"type": "string", "pattern": "(a)\\1"}}}, "RE2"),
        ({"type": "object", "patternProperties": {"(?=x)": {}}, "properties": {"x": {}}}, "RE2"),
        ({"type": "object", "properties": {"x": {"type": 5}}}, "not a valid JSON Schema"),
    ],
)
def test_unsafe_or_broken_inputs_schemas_are_invalid_definitions(
    repo: LibraryRepo, inputs: dict[str, Any], fragment: str
) -> None:
    client = client_for(repo.release("v1.0.0", {"a/b.yml": _definition_with_inputs(inputs)}))
    body = problem(client.get("/v1/agents/a/b"), 422, "invalid-definition")
    assert fragment in body["errors"][0]["message"]


def test_a_catastrophic_pattern_is_matched_in_linear_time(repo: LibraryRepo) -> None:
    inputs = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}
    client = client_for(repo.release("v1.0.0", {"a/b.yml": _definition_with_inputs(inputs)}))
    body = problem(
        client.post("/v1/agents/a/b/render", json={"inputs": {"x": "a" * 5000 + "b"}}), 422, "invalid-inputs"
    )
    assert body["errors"][0]["path"] == "/x"
    ok = client.post("/v1/agents/a/b/render", json={"inputs": {"x": "aaaa"}})
    assert ok.get_json()["messages"][0]["content"] == "aaaa"


def test_deep_inputs_against_a_recursive_schema_are_invalid_inputs(repo: LibraryRepo) -> None:
    inputs = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/nested"}},
        "$defs": {"nested": {"type": "array", "items": {"$ref": "#/$defs/nested"}}},
    }
    client = client_for(repo.release("v1.0.0", {"a/b.yml": _definition_with_inputs(inputs)}))
    deep = '{"inputs": {"x": ' + "[" * 900 + "]" * 900 + "}}"
    response = client.post("/v1/agents/a/b/render", data=deep, content_type="application/json")
    assert response.status_code in (400, 422), response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"


@pytest.mark.parametrize(
    "partial",
    [
        "{{ x|nosuchfilter }}",
        "{{ x is nosuchtest }}",
        "{% for i in [1] %}" * 25 + "{% endfor %}" * 25,
        "{{ " + "(" * 100 + "1" + ")" * 100 + " }}",
        "{{ oops(",
    ],
)
def test_a_broken_partial_makes_its_includer_invalid_and_nothing_else(repo: LibraryRepo, partial: str) -> None:
    files = {
        "_partials/broken.jinja": partial,
        "a/includer.yml": "name: I\nprompt_templates:\n  user: \"{% include '_partials/broken.jinja' %}\"\n",
        "a/fine.yml": "name: Fine\nprompt_templates:\n  user: ok\n",
    }
    client = client_for(repo.release("v1.0.0", files))
    problem(client.get("/v1/agents/a/includer"), 422, "invalid-definition")
    listing = client.get("/v1/agents").get_json()["agents"]
    assert [(a["name"], a["valid"]) for a in listing] == [("fine", True), ("includer", False)]


@pytest.mark.parametrize(
    "template",
    [
        "{{ " + "(" * 100 + "1" + ")" * 100 + " }}",
        "{{ " + "[" * 100 + "]" * 100 + " }}",
        "{% for i in [1] %}" * 25 + "{% endfor %}" * 25,
        "{% if 1 %}" * 120 + "{% endif %}" * 120,
    ],
)
def test_templates_nested_too_deeply_are_invalid_definitions_not_500s(repo: LibraryRepo, template: str) -> None:
    files = {
        "a/deep.yml": json.dumps({"name": "Deep", "prompt_templates": {"user": template}}),
        "a/fine.yml": "name: Fine\nprompt_templates:\n  user: ok\n",
    }
    client = client_for(repo.release("v1.0.0", files))
    body = problem(client.get("/v1/agents/a/deep"), 422, "invalid-definition")
    assert "nested too deeply" in body["errors"][0]["message"] or "too" in body["errors"][0]["message"]
    assert client.get("/v1/agents").status_code == 200


def test_unpaired_surrogates_in_the_body_are_invalid_requests(client: FlaskClient) -> None:
    bodies: list[bytes] = [
        b'{"inputs": {"question": "\\ud800"}}',
        b'{"inputs": {"question": "x", "\\uDFFF": 1}}',
        b'{"inputs": {"question": "\xed\xa0\x80"}}',  # a surrogate's raw UTF-8 bytes, which json reads through
        '{"inputs": {"question": "\ud800"}}'.encode("utf-16-le", "surrogatepass"),
        '\ufeff{"inputs": {"question": "\udbff"}}'.encode("utf-16", "surrogatepass"),
    ]
    for body in bodies:
        response = client.post(
            "/v1/agents/chat/with_rules/render?release=v1.1.0", data=body, content_type="application/json"
        )
        problem(response, 400, "invalid-request")


def test_text_that_only_looks_like_a_surrogate_escape_is_fine(client: FlaskClient) -> None:
    for body, question in [
        (b'{"inputs": {"question": "C:\\\\ud800", "rules": []}}', "C:\\ud800"),  # an escaped backslash, "ud800"
        ('{"inputs": {"question": "caf\u00e9 \U0001f600", "rules": []}}'.encode(), "café 😀"),
        ('{"inputs": {"question": "wide", "rules": []}}'.encode("utf-16"), "wide"),
    ]:
        response = client.post("/v1/agents/chat/with_rules/render?release=v1.1.0", data=body)
        assert response.status_code == 200, response.get_json()
        assert question in response.get_json()["messages"][-1]["content"]


def test_a_template_that_makes_an_unpaired_surrogate_is_a_render_error(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release(
            "v1.0.0", {"a/b.yml": json.dumps({"name": "S", "prompt_templates": {"user": "{{ '%c' % 55296 }}"}})}
        )
    )
    problem(client.post("/v1/agents/a/b/render"), 422, "render-error")


def test_a_slow_render_is_stopped_by_the_deadline(repo: LibraryRepo) -> None:
    template = (
        "{% set s = 'abcdefgh' * 100000 %}{% for i in range(99000) %}{% set t = s|replace('a', 'c') %}{% endfor %}done"
    )
    client = client_for(
        repo.release("v1.0.0", {"a/slow.yml": json.dumps({"name": "Slow", "prompt_templates": {"user": template}})}),
        max_render_seconds=0.2,
    )
    body = problem(client.post("/v1/agents/a/slow/render"), 422, "render-error")
    assert "longer than 0.2 seconds" in body["detail"]


def test_printing_a_nested_list_that_shares_a_large_part_is_refused_first(repo: LibraryRepo) -> None:
    template = (
        "{% set a = range(100000)|list %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
        "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{{ c|string|length }}"
    )
    client = client_for(
        repo.release("v1.0.0", {"a/b.yml": json.dumps({"name": "N", "prompt_templates": {"user": template}})})
    )
    problem(client.post("/v1/agents/a/b/render"), 422, "render-error")


@pytest.mark.parametrize("template", ["{{ [1, 2, 3]|random }}", "{{ lipsum(1) }}"])
def test_nondeterministic_filters_and_globals_are_not_available(repo: LibraryRepo, template: str) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/b.yml": json.dumps({"name": "R", "prompt_templates": {"user": template}})})
    )
    assert client.get("/v1/agents/a/b").status_code in (200, 422)
    response = client.post("/v1/agents/a/b/render")
    assert response.status_code == 422 and response.mimetype == "application/problem+json"
