"""The HTTP API against a real git repository with several tags: releases,
agents, rendering, the OpenAPI document, the API page and the index."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest
from flask.testing import FlaskClient

from tests.conftest import LibraryRepo, client_for
from tests.support.openapi_check import problem, validate_against_openapi


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
    assert body["placeholders"] == []
    assert body["release"]["tag"] == "v1.1.0"
    assert response.headers["X-Registry-Release"] == "v1.1.0"
    validate_against_openapi("/v1/agents/{usecase}/{name}/render", "post", response)


def test_render_fills_the_placeholders_its_inputs_name_and_lists_the_rest(repo: LibraryRepo) -> None:
    seed = "name: Seed\nprompt_templates:\n  assistant: '{agent_scratchpad} Thought:'\n  user: 'Q: {question}'\n"
    client = client_for(repo.release("v1.0.0", {"chat/seed.yml": seed}))
    response = client.post("/v1/agents/chat/seed/render", json={"inputs": {"question": "Why {x}?"}})
    body = response.get_json()
    assert [m["content"] for m in body["messages"]] == ["{agent_scratchpad} Thought:", "Q: Why {x}?"]
    assert body["placeholders"] == [{"message": 0, "name": "agent_scratchpad", "start": 0, "end": 18}]
    validate_against_openapi("/v1/agents/{usecase}/{name}/render", "post", response)
    assert client.post("/v1/agents/chat/seed/render").get_json()["placeholders"][1] == {
        "message": 1,
        "name": "question",
        "start": 3,
        "end": 13,
    }


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
    body = problem(response, 422, "invalid-inputs")
    paths = sorted(e["path"] for e in body["errors"])
    assert paths == ["/extra", "/question", "/rules"]
    validate_against_openapi("/v1/agents/{usecase}/{name}/render", "post", response)


def test_missing_variable_without_schema_is_a_render_error_naming_it(client: FlaskClient) -> None:
    body = problem(
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
    problem(client.get("/problems/nonsense"), 404, "not-found")


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
    problem(client.get(path.format(version=version)), 404, "not-found")


def test_the_docs_page_and_its_assets_stay_public_when_tokens_are_required(released_repo: LibraryRepo) -> None:
    client = client_for(released_repo, api_tokens=("api-token-0123456789abcdef",))
    page = client.get("/docs")
    assert page.status_code == 200
    for url in [*_asset_urls(page.get_data(as_text=True)), "/openapi.json", "/"]:
        with client.get(url) as response:
            assert response.status_code == 200, url
    problem(client.get("/v1/releases"), 401, "unauthorized")


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
