"""The HTTP API's errors: hostile paths, releases, bodies and definitions,
each a problem response of its own type, never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from registry.serving.app import openapi_document
from registry.settings import Settings
from tests.conftest import LibraryRepo, client_for, make_app
from tests.support.openapi_check import problem, validate_against_openapi

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
    problem(client.get(url), 400, "invalid-request")


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
    body = problem(client.get("/v1/agents/chat/minimal", query_string={"release": release}), 400, "invalid-request")
    assert len(body["detail"]) < 500


def test_the_commit_of_a_release_is_not_a_release(client: FlaskClient, released_repo: LibraryRepo) -> None:
    commit = released_repo.git("rev-parse", "v1.0.0")
    problem(client.get(f"/v1/agents?release={commit}"), 400, "invalid-request")


def test_empty_or_repeated_release_is_an_invalid_request(client: FlaskClient) -> None:
    problem(client.get("/v1/agents?release="), 400, "invalid-request")
    problem(client.get("/v1/agents?release=v1.0.0&release=v1.1.0"), 400, "invalid-request")


def test_unknown_release_lists_the_available_ones(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/minimal?release=v9.9.9")
    body = problem(response, 404, "release-not-found")
    assert body["requested"] == "v9.9.9"
    assert body["available"] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)


def test_non_release_tag_is_not_found_as_a_release(repo: LibraryRepo) -> None:
    client = client_for(
        repo.release("9.9.9-not-semver-because+of+plus", {"a/b.yml": "name: B\nprompt_templates:\n  user: hi\n"})
    )
    assert client.get("/v1/releases").get_json() == {"releases": [], "latest": None, "channels": {}}
    problem(client.get("/v1/agents"), 404, "release-not-found")


def test_unknown_agent_is_agent_not_found(client: FlaskClient) -> None:
    response = client.get("/v1/agents/chat/with_rules?release=v1.0.0")
    problem(response, 404, "agent-not-found")
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
    body = problem(response, 422, "invalid-definition")
    located = {(e["path"], e["line"]) for e in body["errors"]}
    assert ("/name", 1) in located
    assert ("/modle", 2) in located
    assert ("/prompt_templates/sytem", 4) in located
    assert ("/prompt_templates/user", 5) in located
    assert ("/params/timeout", 6) in located
    assert all(e["file"] == "ai_gateway/agents/a/bad.yml" for e in body["errors"])
    validate_against_openapi("/v1/agents/{usecase}/{name}", "get", response)
    problem(client.post("/v1/agents/a/bad/render", json={}), 422, "invalid-definition")


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
    body = problem(client.get("/v1/agents/a/hostile"), 422, "invalid-definition")
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
    body = problem(response, 422, slug)
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
    body = problem(client.post("/v1/agents/a/any/render", json={"inputs": inputs}), 422, "invalid-inputs")
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
    body = problem(client.post("/v1/agents/a/big/render"), 422, "render-error")
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
    problem(response, 400, "invalid-request")


def test_ten_megabyte_body_is_refused_as_too_large(client: FlaskClient) -> None:
    payload = json.dumps({"inputs": {"question": "x" * (10 * 1024 * 1024)}})
    response = client.post("/v1/agents/chat/minimal/render", data=payload, content_type="application/json")
    problem(response, 413, "payload-too-large")


def test_unknown_route_and_wrong_method_are_problems(client: FlaskClient) -> None:
    problem(client.get("/nowhere"), 404, "not-found")
    problem(client.get("/v1/agents/chat/minimal/render"), 405, "method-not-allowed")
    response = client.delete("/v1/releases")
    problem(response, 405, "method-not-allowed")
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
    from registry.web.problems import PROBLEM_DESCRIPTIONS

    documented = set(openapi_document()["components"]["schemas"]["Problem"]["properties"]["type"]["enum"])
    for slug in ERRORS_BY_SLUG:
        assert slug in PROBLEM_DESCRIPTIONS
        assert f"/problems/{slug}" in documented


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("POST", "/v1/agents/chat/minimal", "GET, HEAD, OPTIONS"),
        ("DELETE", "/v1/agents/chat/minimal", "GET, HEAD, OPTIONS"),
        ("GET", "/v1/agents/chat/minimal/render", "OPTIONS, POST"),
        ("PUT", "/v1/agents/chat/minimal/render", "OPTIONS, POST"),
        ("GET", "/v1/agents/chat/minimal/parse", "OPTIONS, POST"),
        ("PUT", "/v1/agents/chat/minimal/parse", "OPTIONS, POST"),
    ],
)
def test_wrong_methods_on_agent_routes_name_exactly_the_allowed_ones(
    client: FlaskClient, method: str, url: str, allowed: str
) -> None:
    response = client.open(url, method=method)
    problem(response, 405, "method-not-allowed")
    assert response.headers["Allow"] == allowed  # sorted, the same in every worker


def test_an_unreadable_repository_is_store_unavailable_not_an_empty_list(released_repo: LibraryRepo) -> None:
    import shutil

    client = make_app(Settings(repo=str(released_repo.path))).test_client()
    assert client.get("/v1/releases").status_code == 200
    head = released_repo.git("rev-parse", "HEAD")
    # Objects gone (a broken clone, a lost volume) while refs still name commits.
    shutil.rmtree(released_repo.path / ".git" / "objects")
    (released_repo.path / ".git" / "objects").mkdir()
    (released_repo.path / ".git" / "refs" / "tags" / "v3.0.0").write_text(head + "\n")
    problem(client.get("/v1/releases"), 503, "store-unavailable")
