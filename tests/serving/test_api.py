"""The HTTP API against a real git repository with several tags."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from registry.serving.app import openapi_document
from registry.settings import Settings
from tests.conftest import MINIMAL, LibraryRepo, client_for, make_app
from tests.support.openapi_check import validate_against_openapi


def _problem(response: TestResponse, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json(force=True)
    assert body["type"] == f"/problems/{slug}"
    assert body["status"] == status
    assert body["title"] and body["detail"]
    text = response.get_data(as_text=True)
    assert "Traceback" not in text and "/tmp/" not in text and "site-packages" not in text
    return body


def test_releases_are_listed_newest_first_with_latest_non_prerelease(
    client: FlaskClient, released_repo: LibraryRepo
) -> None:
    response = client.get("/v1/releases")
    body = response.get_json()
    assert [r["tag"] for r in body["releases"]] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]
    assert body["latest"] == "v1.1.0"
    assert body["releases"][0] == {
        "tag": "v2.0.0-rc.1",
        "version": "2.0.0-rc.1",
        "commit": released_repo.git("rev-parse", "v2.0.0-rc.1^{commit}"),
        "prerelease": True,
        "moved": False,
    }
    # an annotated tag is reported with its commit, not the tag object
    assert body["releases"][1]["commit"] == released_repo.git("rev-parse", "v1.1.0^{commit}")
    validate_against_openapi("/v1/releases", "get", response)


def test_agents_of_a_release_are_listed_sorted_with_provenance(client: FlaskClient, released_repo: LibraryRepo) -> None:
    response = client.get("/v1/agents?release=v1.0.0")
    body = response.get_json()
    commit = released_repo.git("rev-parse", "v1.0.0")
    assert body["release"] == {
        "requested": "v1.0.0",
        "tag": "v1.0.0",
        "version": "1.0.0",
        "commit": commit,
        "channel": None,
    }
    assert [(a["usecase"], a["name"]) for a in body["agents"]] == [("chat", "minimal")]
    assert response.headers["X-Registry-Release"] == "v1.0.0"
    assert response.headers["X-Registry-Commit"] == commit
    validate_against_openapi("/v1/agents", "get", response)


def test_invalid_definitions_are_listed_with_their_errors(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release(
            "v0.1.0",
            {
                "chat/good.yml": "name: Good\nprompt_templates:\n  user: hi\n",
                "chat/broken.yml": "name: Broken\nprompt_template:\n  user: hi\n",
                "notes/readme.md": "not a definition",
            },
        )
    )
    response = client.get("/v1/agents")
    agents = response.get_json()["agents"]
    assert [(a["name"], a["valid"]) for a in agents] == [("broken", False), ("good", True)]
    broken = agents[0]
    assert broken["path"] == "ai_gateway/agents/chat/broken.yml"
    assert any(e.get("hint") == "did you mean 'prompt_templates'?" for e in broken["errors"])
    assert "errors" not in agents[1]
    validate_against_openapi("/v1/agents", "get", response)


def test_agent_is_served_with_digest_etag_and_definition_in_file_order(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/minimal?release=v1.0.0")
    body = response.get_json()
    assert body["usecase"] == "chat" and body["name"] == "minimal"
    assert body["path"] == "ai_gateway/agents/chat/minimal.yml"
    assert body["digest"].startswith("sha256:")
    assert response.headers["ETag"] == f'"{body["digest"]}"'
    assert list(body["definition"]["prompt_templates"]) == ["system", "user"]
    assert list(json.loads(response.data)["definition"]) == ["name", "prompt_templates"]
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)


def test_unchanged_agent_keeps_its_digest_across_releases(client: FlaskClient) -> None:
    first = client.get("/v1/agents/chat/minimal?release=v1.0.0").get_json()["digest"]
    same = client.get("/v1/agents/chat/minimal?release=v1.1.0").get_json()["digest"]
    changed = client.get("/v1/agents/chat/minimal?release=v2.0.0-rc.1").get_json()["digest"]
    assert first == same
    assert changed != first


def test_digest_changes_when_only_an_included_partial_changes(repo: LibraryRepo) -> None:
    repo.write("_partials/p.jinja", "one")
    repo.write("a/b.yml", "name: B\nprompt_templates:\n  user: \"{% include '_partials/p.jinja' %}\"\n")
    repo.commit()
    repo.tag("v1.0.0")
    client = client_for(repo.release("v1.0.1", {"_partials/p.jinja": "two"}))
    digests = {client.get(f"/v1/agents/a/b?release={r}").get_json()["digest"] for r in ("v1.0.0", "v1.0.1")}
    assert len(digests) == 2


def test_if_none_match_with_the_digest_gives_304(client: FlaskClient) -> None:
    etag = client.get("/v1/agents/chat/minimal?release=v1.0.0").headers["ETag"]
    response = client.get("/v1/agents/chat/minimal?release=v1.0.0", headers={"If-None-Match": etag})
    assert response.status_code == 304
    assert response.data == b""


def test_release_without_v_finds_the_v_tag(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/minimal?release=1.0.0")
    assert response.get_json()["release"]["tag"] == "v1.0.0"


def test_omitted_release_and_latest_mean_the_highest_non_prerelease(client: FlaskClient) -> None:
    assert client.get("/v1/agents/chat/minimal").get_json()["release"]["tag"] == "v1.1.0"
    assert client.get("/v1/agents/chat/minimal?release=latest").get_json()["release"]["tag"] == "v1.1.0"


def test_render_returns_messages_in_template_order(client: FlaskClient) -> None:
    response = client.post(
        "/v1/agents/chat/with_rules/render?release=v1.1.0",
        json={"inputs": {"question": "Why?", "rules": ["cite sources", "no guessing"]}},
    )
    body = response.get_json()
    assert body["messages"] == [
        {"role": "system", "content": "Be brief.\nRules:\n- cite sources\n- no guessing\n"},
        {"role": "user", "content": "Why?"},
    ]
    assert body["model"] is None and body["params"] is None
    assert body["release"]["tag"] == "v1.1.0"
    assert response.headers["X-Registry-Release"] == "v1.1.0"
    validate_against_openapi("/v1/agents/{usecase}/{name}/render", "post", response)


def test_render_with_an_empty_body_uses_no_inputs(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/static.yml": "name: Static\nprompt_templates:\n  system: Fixed text.\n"})
    )
    response = client.post("/v1/agents/a/static/render")
    assert response.get_json()["messages"] == [{"role": "system", "content": "Fixed text."}]


def test_invalid_inputs_report_every_error(client: FlaskClient) -> None:
    response = client.post(
        "/v1/agents/chat/with_rules/render?release=v1.1.0",
        json={"inputs": {"rules": "not a list", "extra": 1}},
    )
    body = _problem(response, 422, "invalid-inputs")
    paths = sorted(e["path"] for e in body["errors"])
    assert paths == ["/extra", "/question", "/rules"]
    validate_against_openapi("/v1/agents/{usecase}/{name}/render", "post", response)


def test_missing_variable_without_schema_is_a_render_error_naming_it(client: FlaskClient) -> None:
    body = _problem(
        client.post("/v1/agents/chat/minimal/render?release=v1.0.0", json={"inputs": {}}), 422, "render-error"
    )
    assert "'question' is undefined" in body["detail"]


def test_openapi_document_lists_every_route(app) -> None:  # type: ignore[no-untyped-def]
    document = app.test_client().get("/openapi.json").get_json()
    assert document["openapi"].startswith("3.1")
    routes = {
        rule.rule.replace("<", "{").replace(">", "}").replace("{malformed_agent_path:rest}", "")
        for rule in app.url_map.iter_rules()
        # The web UI's pages are for people, not the API (docs/ui.md).
        if rule.endpoint != "static" and not rule.rule.startswith("/ui")
    }
    documented = set(document["paths"])
    assert routes - {"/v1/agents/"} <= documented


def test_healthz(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.get_json() == {"status": "ok"}
    validate_against_openapi("/healthz", "get", response)


def test_problem_types_are_described_by_the_registry(client: FlaskClient) -> None:
    body = client.get("/problems/agent-not-found").get_json()
    assert body["type"] == "/problems/agent-not-found" and body["description"]
    _problem(client.get("/problems/nonsense"), 404, "not-found")


# --- errors and hostile inputs -------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/v1/agents/chat/..",
        "/v1/agents/../chat",
        "/v1/agents/chat/%2e%2e",
        "/v1/agents/%2e%2e/%2e%2e",
        "/v1/agents/chat/.hidden",
        "/v1/agents/Chat/minimal",
        "/v1/agents/chat/mini%00mal",
        "/v1/agents/chat/" + "a" * 65,
        "/v1/agents/chat/" + "a" * 5000,
        "/v1/agents/chat/minimal.yml",
        "/v1/agents/chat/min%C4%B1mal",  # dotless i
        "/v1/agents/chat/%EF%BD%8D%EF%BD%89%EF%BD%8E%EF%BD%89%EF%BD%8D%EF%BD%81%EF%BD%8C",  # fullwidth
        "/v1/agents/chat/minimal%0a",
        "/v1/agents/chat/mini%20mal",
        "/v1/agents/chat%2Fminimal/x",
        "/v1/agents/chat/a%2Fb",
        "/v1/agents/chat/a/b",
        "/v1/agents//etc/passwd",
        "/v1/agents/chat/%5C..%5Cx",
    ],
)
def test_hostile_agent_paths_are_invalid_requests(client: FlaskClient, url: str) -> None:
    _problem(client.get(url), 400, "invalid-request")


@pytest.mark.parametrize(
    "release",
    [
        "--upload-pack=x",
        "-x",
        "HEAD",
        "HEAD~1",
        "main",
        "refs/heads/main",
        "refs/tags/v1.0.0",
        "v1.0.0^{commit}",
        "v1.0.0~1",
        "@{-1}",
        "0123456789abcdef0123456789abcdef01234567",
        "v01.0.0",
        ">=",
        "1.0.0 ||",
        "|| ||",
        "^1.0.0 <",
        "１.0.0",
        "1.0.0\n",
        " 1.0.0",
        "v1.0.0 ",
        "x" * 10000,
    ],
)
def test_release_values_that_look_like_git_revisions_are_invalid_requests(client: FlaskClient, release: str) -> None:
    body = _problem(client.get("/v1/agents/chat/minimal", query_string={"release": release}), 400, "invalid-request")
    assert len(body["detail"]) < 500


def test_the_commit_of_a_release_is_not_a_release(client: FlaskClient, released_repo: LibraryRepo) -> None:
    commit = released_repo.git("rev-parse", "v1.0.0")
    _problem(client.get(f"/v1/agents?release={commit}"), 400, "invalid-request")


def test_empty_or_repeated_release_is_an_invalid_request(client: FlaskClient) -> None:
    _problem(client.get("/v1/agents?release="), 400, "invalid-request")
    _problem(client.get("/v1/agents?release=v1.0.0&release=v1.1.0"), 400, "invalid-request")


def test_unknown_release_lists_the_available_ones(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/minimal?release=v9.9.9")
    body = _problem(response, 404, "release-not-found")
    assert body["requested"] == "v9.9.9"
    assert body["available"] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)


def test_non_release_tag_is_not_found_as_a_release(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release("9.9.9-not-semver-because+of+plus", {"a/b.yml": "name: B\nprompt_templates:\n  user: hi\n"})
    )
    assert client.get("/v1/releases").get_json() == {"releases": [], "latest": None, "channels": {}}
    _problem(client.get("/v1/agents"), 404, "release-not-found")


def test_unknown_agent_is_agent_not_found(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/with_rules?release=v1.0.0")
    _problem(response, 404, "agent-not-found")
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)


def test_invalid_definition_is_422_with_every_error_located(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release(
            "v1.0.0",
            {
                "a/bad.yml": "name: 5\nmodle: x\nprompt_templates:\n  sytem: hi\n  user: '{{ oops'\nparams: {timeout: -1}\n",
            },
        )
    )
    response = client.get("/v1/agents/a/bad")
    body = _problem(response, 422, "invalid-definition")
    located = {(e["path"], e["line"]) for e in body["errors"]}
    assert ("/name", 1) in located
    assert ("/modle", 2) in located
    assert ("/prompt_templates/sytem", 4) in located
    assert ("/prompt_templates/user", 5) in located
    assert ("/params/timeout", 6) in located
    assert all(e["file"] == "ai_gateway/agents/a/bad.yml" for e in body["errors"])
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)
    _problem(client.post("/v1/agents/a/bad/render", json={}), 422, "invalid-definition")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"- a\n- b\n", "mapping"),
        (b"just a string\n", "mapping"),
        (b"", "empty"),
        (bytes(range(256)) * 10, "UTF-8"),
        (b"\x00\x01\x02binary", "not"),
        (b"name: a\nname: b\nprompt_templates: {user: x}\n", "duplicate key 'name'"),
        (b"name: [unclosed\n", "syntax"),
        (
            b"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
            "expands",
        ),
        (b"name: x\n" + b"# padding\n" * 1_100_000, "limit"),
        (b"[" * 10000, "nesting"),
        (b"name: !!python/object/apply:os.system [echo hi]\nprompt_templates: {user: x}\n", "tag"),
        (b"name: x\nprompt_templates: {user: x}\n---\nname: y\n", "document"),
    ],
)
def test_hostile_yaml_is_an_invalid_definition_and_harms_no_other_file(
    repo: LibraryRepo, content: bytes, fragment: str
) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/hostile.yml": content, "a/fine.yml": "name: Fine\nprompt_templates:\n  user: ok\n"})
    )
    body = _problem(client.get("/v1/agents/a/hostile"), 422, "invalid-definition")
    assert any(fragment.lower() in e["message"].lower() for e in body["errors"]), body["errors"]
    assert client.get("/v1/agents/a/fine").status_code == 200
    listing = client.get("/v1/agents").get_json()["agents"]
    assert [(a["name"], a["valid"]) for a in listing] == [("fine", True), ("hostile", False)]


@pytest.mark.parametrize(
    ("template", "slug"),
    [
        ("{{ ''.__class__.__mro__ }}", "render-error"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "render-error"),
        ("{{ cycler.__init__.__globals__ }}", "render-error"),
        ("{{ joiner.__init__.__globals__.os }}", "render-error"),
        ("{{ lipsum.__globals__ }}", "render-error"),
        ("{{ self._TemplateReference__context }}", "render-error"),
        ("{{ config }}", "render-error"),
        ("{{ request }}", "render-error"),
        ("{{ range(100000000) }}", "render-error"),
        ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "render-error"),
        ("{{ 'x' * 100000000 }}", "render-error"),
        ("{{ 2 ** 100000000 }}", "render-error"),
        ("{{ (9 ** 9) ** (9 ** 9) }}", "render-error"),
        ("{{ 'x'|center(100000000) }}", "render-error"),
        ("{{ '%099999999d' % 1 }}", "render-error"),
        ("{% include '../../etc/passwd' %}", "invalid-definition"),
        ("{% include '/etc/passwd' %}", "invalid-definition"),
        ("{% include '_partials/missing.jinja' %}", "invalid-definition"),
        ("{% include 'x/../../../etc/passwd' %}", "invalid-definition"),
        ("{% import '../secrets' as s %}", "invalid-definition"),
        ("{% extends '/etc/hosts' %}", "invalid-definition"),
        ("{% include name %}", "render-error"),
    ],
)
def test_templates_that_try_to_escape_the_sandbox_render_nothing_dangerous(
    repo: LibraryRepo, template: str, slug: str
) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/escape.yml": json.dumps({"name": "Escape", "prompt_templates": {"user": template}})})
    )
    response = client.post("/v1/agents/a/escape/render", json={"inputs": {"name": "../../../../etc/passwd"}})
    body = _problem(response, 422, slug)
    assert "root:" not in json.dumps(body)


_COUNTED = "the request body holds more than 20,000 values; inputs may hold at most 10,000"


@pytest.mark.parametrize(
    ("inputs", "detail"),
    [
        # As large as a 1 MiB body allows; parsing them cost 8 and 44 ms.
        ({"passages": [{"text": "abcdefg"}] * 33_000}, _COUNTED),
        (
            {"passages": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] * 12_000},
            _COUNTED,
        ),
        # Just over twice the budget, counted by commas alone (20,002), and by containers alone.
        ({"numbers": [1] * 20_003}, _COUNTED),
        ({"nested": [[]] * 20_002}, _COUNTED),
        # Over the budget, not twice over (20,001 values, 20,000 commas):
        # parsed, and refused by the budget in its own words, naming the input.
        ({"numbers": [1] * 20_000}, "/numbers: inputs hold more than the limit of 10,000 values"),
    ],
    ids=["wide", "wide-and-deep", "commas", "containers", "past-the-count"],
)
def test_bodies_with_too_many_values_are_refused_before_parsing(
    repo: LibraryRepo, inputs: dict[str, Any], detail: str
) -> None:
    client = client_for(repo.release("v1.0.0", {"a/any.yml": "name: Any\nprompt_templates:\n  user: hello\n"}))
    body = _problem(client.post("/v1/agents/a/any/render", json={"inputs": inputs}), 422, "invalid-inputs")
    assert body["detail"].startswith(detail)


def test_commas_and_brackets_inside_strings_do_not_count_as_values(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/count.yml": 'name: Count\nprompt_templates:\n  user: "{{ text | length }}"\n'})
    )
    text = '[{",' * 100_000 + "\\" * 1000  # 401,000 characters of commas, brackets, quotes and backslashes
    response = client.post("/v1/agents/a/count/render", json={"inputs": {"text": text}})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["messages"][0]["content"] == str(len(text))


def test_render_output_over_the_cap_is_a_render_error(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/big.yml": "name: Big\nprompt_templates:\n  user: \"{{ 'x' * 2000 }}\"\n"}),
        max_render_bytes=1000,
    )
    body = _problem(client.post("/v1/agents/a/big/render"), 422, "render-error")
    assert "1000" in body["detail"]


@pytest.mark.parametrize(
    "body",
    [
        "[1, 2]",
        '"a string"',
        "42",
        "null",
        "{not json",
        '{"inputs": [1]}',
        '{"inputs": "text"}',
        '{"inputs": null}',
        '{"inputs": {}, "input": {}}',
        '{"inputs": {"question": NaN}}',
        '{"inputs": {"question": 1e999}}',
        '{"inputs": {"question": ' + "9" * 5000 + "}}",
        "[" * 100000,
        b"\xff\xfe\x00garbage",
    ],
)
def test_bad_render_bodies_are_invalid_requests(client: FlaskClient, body: str | bytes) -> None:
    response = client.post("/v1/agents/chat/minimal/render?release=v1.0.0", data=body, content_type="application/json")
    _problem(response, 400, "invalid-request")


def test_ten_megabyte_body_is_refused_as_too_large(client: FlaskClient) -> None:
    payload = json.dumps({"inputs": {"question": "x" * (10 * 1024 * 1024)}})
    response = client.post("/v1/agents/chat/minimal/render", data=payload, content_type="application/json")
    _problem(response, 413, "payload-too-large")


def test_unknown_route_and_wrong_method_are_problems(client: FlaskClient) -> None:
    _problem(client.get("/nowhere"), 404, "not-found")
    _problem(client.get("/v1/agents/chat/minimal/render"), 405, "method-not-allowed")
    response = client.delete("/v1/releases")
    _problem(response, 405, "method-not-allowed")
    assert "GET" in response.headers["Allow"]


def test_concurrent_requests_for_different_releases_never_mix_answers(app, released_repo: LibraryRepo) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    commits = {tag: released_repo.git("rev-parse", f"{tag}^{{commit}}") for tag in ("v1.0.0", "v1.1.0", "v2.0.0-rc.1")}
    wording = {"v1.0.0": "You are helpful.", "v1.1.0": "You are helpful.", "v2.0.0-rc.1": "You are very helpful."}

    def fetch(index: int) -> bool:
        client = app.test_client()
        tag = list(commits)[index % 3]
        response = client.get(f"/v1/agents/chat/minimal?release={tag}")
        body = response.get_json()
        return (
            (body["release"]["tag"], body["release"]["commit"]) == (tag, commits[tag])
            and response.headers["X-Registry-Commit"] == commits[tag]
            and body["definition"]["prompt_templates"]["system"] == wording[tag]
            and response.headers["ETag"] == f'"{body["digest"]}"'
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(fetch, range(120)))


def test_every_error_class_has_a_described_and_documented_problem_type() -> None:
    from registry.errors import ERRORS_BY_SLUG
    from registry.serving.problems import PROBLEM_DESCRIPTIONS

    documented = set(openapi_document()["components"]["schemas"]["Problem"]["properties"]["type"]["enum"])
    for slug in ERRORS_BY_SLUG:
        assert slug in PROBLEM_DESCRIPTIONS
        assert f"/problems/{slug}" in documented


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("POST", "/v1/agents/chat/minimal", {"GET", "HEAD", "OPTIONS"}),
        ("DELETE", "/v1/agents/chat/minimal", {"GET", "HEAD", "OPTIONS"}),
        ("GET", "/v1/agents/chat/minimal/render", {"POST", "OPTIONS"}),
        ("PUT", "/v1/agents/chat/minimal/render", {"POST", "OPTIONS"}),
        ("GET", "/v1/agents/chat/minimal/parse", {"POST", "OPTIONS"}),
        ("PUT", "/v1/agents/chat/minimal/parse", {"POST", "OPTIONS"}),
    ],
)
def test_wrong_methods_on_agent_routes_name_exactly_the_allowed_ones(
    client: FlaskClient, method: str, url: str, allowed: set[str]
) -> None:
    response = client.open(url, method=method)
    _problem(response, 405, "method-not-allowed")
    assert {m.strip() for m in response.headers["Allow"].split(",")} == allowed


def test_an_unreadable_repository_is_store_unavailable_not_an_empty_list(released_repo: LibraryRepo) -> None:
    import shutil

    client = make_app(Settings(repo=str(released_repo.path))).test_client()
    assert client.get("/v1/releases").status_code == 200
    head = released_repo.git("rev-parse", "HEAD")
    # Objects gone (a broken clone, a lost volume) while refs still name commits.
    shutil.rmtree(released_repo.path / ".git" / "objects")
    (released_repo.path / ".git" / "objects").mkdir()
    (released_repo.path / ".git" / "refs" / "tags" / "v3.0.0").write_text(head + "\n")
    _problem(client.get("/v1/releases"), 503, "store-unavailable")


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
        body = _problem(client.post("/v1/agents/a/ssrf/render", json={"inputs": {"x": 1}}), 422, "invalid-definition")
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
    body = _problem(client.get("/v1/agents/a/b"), 422, "invalid-definition")
    assert fragment in body["errors"][0]["message"]


def test_a_catastrophic_pattern_is_matched_in_linear_time(repo: LibraryRepo) -> None:
    inputs = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}
    client = client_for(repo.release("v1.0.0", {"a/b.yml": _definition_with_inputs(inputs)}))
    body = _problem(
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
    _problem(client.get("/v1/agents/a/includer"), 422, "invalid-definition")
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
    body = _problem(client.get("/v1/agents/a/deep"), 422, "invalid-definition")
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
        _problem(response, 400, "invalid-request")


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
    _problem(client.post("/v1/agents/a/b/render"), 422, "render-error")


def test_a_slow_render_is_stopped_by_the_deadline(repo: LibraryRepo) -> None:
    template = (
        "{% set s = 'abcdefgh' * 100000 %}{% for i in range(99000) %}{% set t = s|replace('a', 'c') %}{% endfor %}done"
    )
    client = client_for(
        repo.release("v1.0.0", {"a/slow.yml": json.dumps({"name": "Slow", "prompt_templates": {"user": template}})}),
        max_render_seconds=0.2,
    )
    body = _problem(client.post("/v1/agents/a/slow/render"), 422, "render-error")
    assert "longer than 0.2 seconds" in body["detail"]


def test_printing_a_nested_list_that_shares_a_large_part_is_refused_first(repo: LibraryRepo) -> None:
    template = (
        "{% set a = range(100000)|list %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
        "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{{ c|string|length }}"
    )
    client = client_for(
        repo.release("v1.0.0", {"a/b.yml": json.dumps({"name": "N", "prompt_templates": {"user": template}})})
    )
    _problem(client.post("/v1/agents/a/b/render"), 422, "render-error")


@pytest.mark.parametrize("template", ["{{ [1, 2, 3]|random }}", "{{ lipsum(1) }}"])
def test_nondeterministic_filters_and_globals_are_not_available(repo: LibraryRepo, template: str) -> None:
    client = client_for(
        repo.release("v1.0.0", {"a/b.yml": json.dumps({"name": "R", "prompt_templates": {"user": template}})})
    )
    assert client.get("/v1/agents/a/b").status_code in (200, 422)
    response = client.post("/v1/agents/a/b/render")
    assert response.status_code == 422 and response.mimetype == "application/problem+json"


# --- ranges and channels ------------------------------------------------------------------------


def test_a_range_stays_on_its_major_while_new_majors_are_tagged(repo: LibraryRepo) -> None:
    client = client_for(repo.release("v1.2.0", {"chat/minimal.yml": MINIMAL}))
    assert client.get("/v1/agents/chat/minimal?release=^1.2").get_json()["release"] == {
        "requested": "^1.2",
        "tag": "v1.2.0",
        "version": "1.2.0",
        "commit": repo.git("rev-parse", "HEAD"),
        "channel": None,
    }
    repo.release("v2.0.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "terse")})
    response = client.get("/v1/agents/chat/minimal?release=^1.2")
    assert response.headers["X-Registry-Release"] == "v1.2.0"
    assert response.get_json()["definition"]["prompt_templates"]["system"] == "You are helpful."
    repo.release("v1.3.0", {"chat/minimal.yml": MINIMAL.replace("helpful", "kind")})
    assert client.get("/v1/agents/chat/minimal?release=^1.2").headers["X-Registry-Release"] == "v1.3.0"
    assert client.get("/v1/agents/chat/minimal").headers["X-Registry-Release"] == "v2.0.0"


def test_an_unsatisfiable_range_is_release_not_found_with_the_releases(client: FlaskClient) -> None:
    body = _problem(client.get("/v1/agents/chat/minimal?release=^3.0.0"), 404, "release-not-found")
    assert body["requested"] == "^3.0.0"
    assert body["available"] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]


@pytest.mark.parametrize("release", ["^" + "1" * 10_000, " || ".join(["^1.0.0"] * 200), "||" * 2000, "^1.2 <"])
def test_malformed_and_enormous_ranges_are_invalid_requests(client: FlaskClient, release: str) -> None:
    body = _problem(client.get("/v1/agents", query_string={"release": release}), 400, "invalid-request")
    assert len(json.dumps(body)) < 600


def _with_channels(repo: LibraryRepo, text: str) -> None:
    repo.write("channels.yml", text, under_agents=False)
    repo.commit("channels")


def test_channels_follow_the_channels_file_on_the_default_branch(released_repo: LibraryRepo) -> None:
    _with_channels(released_repo, "production: v1.0.0\ncanary: ^2.0.0-0\n")
    client = client_for(released_repo)
    response = client.get("/v1/agents/chat/minimal?release=@production")
    assert response.get_json()["release"]["channel"] == "production"
    assert response.get_json()["release"]["requested"] == "@production"
    assert response.headers["X-Registry-Release"] == "v1.0.0"
    assert client.get("/v1/agents/chat/minimal?release=@canary").headers["X-Registry-Release"] == "v2.0.0-rc.1"
    # Promotion is a commit to the channels file: served at once, no tag needed.
    _with_channels(released_repo, "production: v1.1.0\ncanary: ^2.0.0-0\n")
    assert client.get("/v1/agents/chat/minimal?release=@production").headers["X-Registry-Release"] == "v1.1.0"
    channels = client.get("/v1/releases").get_json()["channels"]
    assert channels["production"] == {
        "target": "v1.1.0",
        "tag": "v1.1.0",
        "commit": released_repo.git("rev-parse", "v1.1.0^{commit}"),
    }


def test_a_channel_naming_no_release_is_reported_everywhere(released_repo: LibraryRepo) -> None:
    _with_channels(released_repo, "production: v9.0.0\n")
    client = client_for(released_repo)
    body = _problem(client.get("/v1/agents?release=@production"), 404, "release-not-found")
    assert body["target"] == "v9.0.0"
    assert "matches no release" in client.get("/v1/releases").get_json()["channels"]["production"]["error"]


@pytest.mark.parametrize("text", ["production: [v1\n", "- v1.0.0\n", "production: v1.0.0\nproduction: v1.1.0\n"])
def test_an_invalid_channels_file_is_reported_and_no_channel_resolves(released_repo: LibraryRepo, text: str) -> None:
    _with_channels(released_repo, text)
    client = client_for(released_repo)
    releases = client.get("/v1/releases").get_json()
    assert releases["channel_errors"][0]["file"] == "channels.yml"
    _problem(client.get("/v1/agents?release=@production"), 404, "release-not-found")
    assert client.get("/v1/agents?release=v1.0.0").status_code == 200


def test_no_channels_file_means_no_channels(client: FlaskClient) -> None:
    assert client.get("/v1/releases").get_json()["channels"] == {}
    body = _problem(client.get("/v1/agents?release=@production"), 404, "release-not-found")
    assert "no channels.yml" in body["detail"]


def test_the_channels_file_path_is_configurable(released_repo: LibraryRepo) -> None:
    released_repo.write("deploy/channels.yaml", "production: v1.0.0\n", under_agents=False)
    released_repo.commit("channels elsewhere")
    client = client_for(released_repo, channels_file="deploy/channels.yaml")
    assert client.get("/v1/agents?release=@production").headers["X-Registry-Release"] == "v1.0.0"


@pytest.mark.parametrize("release", ["@", "@../production", "@a/b", "@Production", "@prod%00", "@" + "a" * 65, "@@x"])
def test_channel_names_with_path_characters_are_invalid_requests(client: FlaskClient, release: str) -> None:
    _problem(client.get("/v1/agents", query_string={"release": release}), 400, "invalid-request")


# --- waiting for new releases -------------------------------------------------------------------


def test_releases_carry_an_etag_that_changes_with_releases_and_channels(released_repo: LibraryRepo) -> None:
    client = client_for(released_repo)
    first = client.get("/v1/releases").headers["ETag"]
    assert client.get("/v1/releases", headers={"If-None-Match": first}).status_code == 304
    released_repo.tag("v1.2.0")
    second = client.get("/v1/releases").headers["ETag"]
    assert second != first
    released_repo.write("channels.yml", "production: v1.0.0\n", under_agents=False)
    released_repo.commit("channels")
    assert client.get("/v1/releases").headers["ETag"] != second


def test_a_long_poll_returns_as_soon_as_a_release_is_tagged(released_repo: LibraryRepo) -> None:
    client = client_for(released_repo)
    etag = client.get("/v1/releases").headers["ETag"]
    timer = threading.Timer(0.5, lambda: released_repo.tag("v1.5.0"))
    timer.start()
    response = client.get("/v1/releases", headers={"If-None-Match": etag, "Prefer": "wait=30"})
    timer.join()
    assert response.status_code == 200
    assert "v1.5.0" in [r["tag"] for r in response.get_json()["releases"]]
    assert response.headers["Preference-Applied"] == "wait=30"


def test_a_long_poll_with_no_change_ends_in_304(client: FlaskClient) -> None:
    etag = client.get("/v1/releases").headers["ETag"]
    response = client.get("/v1/releases", headers={"If-None-Match": etag, "Prefer": "wait=0.3"})
    assert response.status_code == 304
    assert response.headers["ETag"] == etag
    assert response.headers["Preference-Applied"] == "wait=0.3"


@pytest.mark.parametrize("prefer", ["wait=abc", "wait=-5", "wait=nan", "wait=inf", "respond-async", "wait="])
def test_odd_wait_preferences_do_not_wait(client: FlaskClient, prefer: str) -> None:
    etag = client.get("/v1/releases").headers["ETag"]
    response = client.get("/v1/releases", headers={"If-None-Match": etag, "Prefer": prefer})
    assert response.status_code == 304
    assert "Preference-Applied" not in response.headers


def test_waits_are_capped_at_sixty_seconds_and_slots_are_bounded(released_repo: LibraryRepo) -> None:
    app = make_app(Settings(repo=str(released_repo.path), connections=2))  # one long-poll slot (half the connections)
    etag = app.test_client().get("/v1/releases").headers["ETag"]
    results: list[TestResponse] = []
    holder = threading.Thread(
        target=lambda: results.append(
            app.test_client().get("/v1/releases", headers={"If-None-Match": etag, "Prefer": "wait=1000"})
        )
    )
    holder.start()
    time.sleep(0.3)
    # The one slot is taken: this request is answered at once, without waiting.
    immediate = app.test_client().get("/v1/releases", headers={"If-None-Match": etag, "Prefer": "wait=5"})
    assert immediate.status_code == 304 and "Preference-Applied" not in immediate.headers
    released_repo.tag("v1.6.0")
    holder.join(timeout=10)
    assert results and results[0].status_code == 200
    assert results[0].headers["Preference-Applied"] == "wait=60"


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
    body = _problem(response, 400, "invalid-request")
    assert body["parameter"] == "relase"
    assert "unknown query parameter 'relase'" in body["detail"]
    assert "did you mean 'release'?" in body["detail"]
    assert "X-Registry-Release" not in response.headers
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)


def test_an_unknown_parameter_with_no_close_match_names_what_the_route_takes(client: FlaskClient) -> None:
    body = _problem(client.get("/v1/diff?from=v1.0.0&to=v1.1.0&colour=red"), 400, "invalid-request")
    assert body["parameter"] == "colour"
    assert "did you mean" not in body["detail"] and "'from'" in body["detail"] and "'to'" in body["detail"]
    body = _problem(client.get("/healthz?verbose=1"), 400, "invalid-request")
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
    body = _problem(client.get(url), 400, "invalid-request")
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
                body = _problem(response, 400, "invalid-request")
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
                assert _problem(refused, 400, "invalid-request").get("parameter") == name, (template, name)
                declared += 1
    assert declared >= 7


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    if "$ref" not in item:
        return item
    resolved: dict[str, Any] = document
    for part in item["$ref"].removeprefix("#/").split("/"):
        resolved = resolved[part]
    return resolved


# --- the API page and the index -------------------------------------------------


def _asset_urls(page: str) -> list[str]:
    return re.findall(r'(?:href|src)="(/docs/assets/[^"]+)"', page)


def test_docs_is_swagger_ui_over_the_openapi_document_with_local_assets(client: FlaskClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200 and response.mimetype == "text/html"
    page = response.get_data(as_text=True)
    assets = _asset_urls(page)
    assert {url.rsplit("/", 1)[1] for url in assets} >= {"swagger-ui.css", "swagger-ui-bundle.js"}
    assert 'data-url="/openapi.json"' in page
    assert "http://" not in page and "https://" not in page and "//cdn" not in page  # works offline
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "'unsafe-inline'" not in policy
    # The one inline script is allowed by its hash, so no other inline script runs.
    (inline,) = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    assert f"script-src 'self' 'sha256-{digest}'" in policy
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-cache"
    assert client.get("/docs", headers={"If-None-Match": response.headers["ETag"]}).status_code == 304
    validate_against_openapi("/docs", "get", response)


def test_docs_with_a_trailing_slash_is_the_same_page(client: FlaskClient) -> None:
    with_slash = client.get("/docs/")
    assert with_slash.status_code == 200 and with_slash.mimetype == "text/html"
    assert with_slash.get_data() == client.get("/docs").get_data()


def test_docs_assets_come_from_the_package_with_long_lived_caching(client: FlaskClient) -> None:
    page = client.get("/docs").get_data(as_text=True)
    kinds = {"css": "text/css", "js": "text/javascript", "png": "image/png"}
    for url in _asset_urls(page):
        with client.get(url) as response:
            assert response.status_code == 200, url
            assert response.mimetype == kinds[url.rsplit(".", 1)[1]], (url, response.mimetype)
            assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert len(response.data) > 100
        with client.get(url, headers={"If-None-Match": response.headers["ETag"]}) as again:
            assert again.status_code == 304
    with client.get(next(url for url in _asset_urls(page) if url.endswith("/swagger-ui-bundle.js"))) as bundle:
        assert b"SwaggerUIBundle" in bundle.data


@pytest.mark.parametrize(
    "path",
    [
        "/docs/assets/0.0.1/swagger-ui.css",  # another version's URL
        "/docs/assets/{version}/oauth2-redirect.html",  # in the package, but not part of the page
        "/docs/assets/{version}/..%2F__init__.py",
        "/docs/assets/{version}/nothing.js",
    ],
)
def test_only_the_pages_own_assets_are_served(client: FlaskClient, path: str) -> None:
    page = client.get("/docs").get_data(as_text=True)
    version = _asset_urls(page)[0].split("/")[3]
    _problem(client.get(path.format(version=version)), 404, "not-found")


def test_the_docs_page_and_its_assets_stay_public_when_tokens_are_required(released_repo: LibraryRepo) -> None:
    client = client_for(released_repo, api_tokens=("api-token-0123456789abcdef",))
    page = client.get("/docs")
    assert page.status_code == 200
    for url in [*_asset_urls(page.get_data(as_text=True)), "/openapi.json", "/"]:
        with client.get(url) as response:
            assert response.status_code == 200, url
    _problem(client.get("/v1/releases"), 401, "unauthorized")


def test_the_index_page_links_the_docs_the_document_the_releases_and_health(client: FlaskClient) -> None:
    browser = client.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser.status_code == 302 and browser.headers["Location"] == "/ui/"
    assert "Accept" in browser.headers["Vary"]
    page = client.get("/ui/").get_data(as_text=True)
    for link in ("/docs", "/openapi.json", "/v1/releases", "/healthz"):
        assert f'href="{link}"' in page
    machine = client.get("/", headers={"Accept": "application/json"})
    assert machine.mimetype == "application/json"
    assert machine.get_json()["links"] == {
        "docs": "/docs",
        "openapi": "/openapi.json",
        "releases": "/v1/releases",
        "health": "/healthz",
        "ui": "/ui/",
    }
    validate_against_openapi("/", "get", machine)


def test_parsing_a_body_leaves_the_garbage_collector_as_it_was(client: FlaskClient) -> None:
    import gc

    nested = {"inputs": {"question": "q", "deep": [[[[1]]]] * 1000}}
    assert gc.isenabled()
    client.post("/v1/agents/chat/minimal/render?release=v1.0.0", json=nested)
    client.post("/v1/agents/chat/minimal/render?release=v1.0.0", data=b"{not json", content_type="application/json")
    assert gc.isenabled()
    gc.disable()
    try:
        client.post("/v1/agents/chat/minimal/render?release=v1.0.0", json=nested)
        assert not gc.isenabled(), "a collector the caller paused stays paused"
    finally:
        gc.enable()
