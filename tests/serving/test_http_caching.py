"""HTTP caching, bearer tokens, administrative endpoints and metrics."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from registry.settings import Settings
from tests.conftest import LibraryRepo, client_for, make_app

API_TOKEN = "gateway-token-0123456789"
OTHER_TOKEN = "second-gateway-token-abcdef"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
INPUTS = {"inputs": {"question": "Why?", "rules": ["be brief"]}}


def _render(client: FlaskClient, release: str = "v1.1.0", **kwargs: Any) -> Any:
    return client.post(f"/v1/agents/chat/with_rules/render?release={release}", json=INPUTS, **kwargs)


@pytest.mark.parametrize("release", ["v1.0.0", "1.0.0", "v1.1.0"])
def test_an_exact_tag_is_cacheable_forever(client: FlaskClient, release: str) -> None:
    response = client.get(f"/v1/agents/chat/minimal?release={release}")
    assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert "Vary" not in response.headers


@pytest.mark.parametrize("release", ["^1", "latest", "~1.0", ">=1.0.0 <2.0.0", None])
def test_a_pointer_is_cacheable_briefly(released_repo: LibraryRepo, release: str | None) -> None:
    client = client_for(released_repo, cache_max_age=7)
    query = f"?release={release}" if release else ""
    response = client.get(f"/v1/agents/chat/minimal{query}")
    assert response.headers["Cache-Control"] == "public, max-age=7"
    assert client.get(f"/v1/agents{query}").headers["Cache-Control"] == "public, max-age=7"


def test_a_channel_is_cacheable_briefly(released_repo: LibraryRepo) -> None:
    released_repo.write("channels.yml", "production: v1.0.0\n", under_agents=False)
    released_repo.commit("channels")
    response = client_for(released_repo).get("/v1/agents/chat/minimal?release=@production")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "public, max-age=10"


def test_the_worktree_is_never_immutable() -> None:
    app = make_app(Settings())  # the bundled library, as the release "worktree"
    response = app.test_client().get("/v1/agents/chat/minimal?release=worktree")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "public, max-age=10"


def test_errors_and_the_release_list_are_not_kept(client: FlaskClient) -> None:
    assert client.get("/v1/agents/chat/nope?release=v1.0.0").headers["Cache-Control"] == "no-store"
    assert client.get("/v1/releases").headers["Cache-Control"] == "no-cache"


def test_if_none_match_gives_304_with_current_provenance(client: FlaskClient) -> None:
    first = client.get("/v1/agents/chat/minimal?release=v1.0.0")
    etag = first.headers["ETag"]
    assert etag == f'"{first.get_json()["digest"]}"'
    again = client.get("/v1/agents/chat/minimal?release=^1", headers={"If-None-Match": etag})
    # v1.1.0 did not change chat/minimal: same digest, so the client's copy holds.
    assert again.status_code == 304 and again.data == b""
    assert again.headers["X-Registry-Release"] == "v1.1.0"
    assert again.headers["ETag"] == etag
    changed = client.get("/v1/agents/chat/minimal?release=2.0.0-rc.1", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert client.get("/v1/agents/chat/minimal?release=v1.0.0", headers={"If-None-Match": "*"}).status_code == 304
    listed = client.get(
        "/v1/agents/chat/minimal?release=v1.0.0", headers={"If-None-Match": f'"other", W/{etag}, "more"'}
    )
    assert listed.status_code == 304


def test_render_has_an_etag_and_answers_304_without_rendering(client: FlaskClient) -> None:
    first = _render(client)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert first.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    again = _render(client, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.data == b""
    assert again.headers["ETag"] == etag and again.headers["X-Registry-Release"] == "v1.1.0"
    other_inputs = client.post(
        "/v1/agents/chat/with_rules/render?release=v1.1.0",
        json={"inputs": {"question": "How?", "rules": []}},
        headers={"If-None-Match": etag},
    )
    assert other_inputs.status_code == 200 and other_inputs.headers["ETag"] != etag
    # Key order in the inputs does not matter; the values do.
    reordered = client.post(
        "/v1/agents/chat/with_rules/render?release=v1.1.0",
        data='{"inputs": {"rules": ["be brief"], "question": "Why?"}}',
        content_type="application/json",
    )
    assert reordered.headers["ETag"] == etag


def test_an_invalid_render_is_refused_even_with_a_matching_etag(client: FlaskClient) -> None:
    etag = _render(client).headers["ETag"]
    bad = client.post("/v1/agents/chat/with_rules/render?release=v1.1.0", data=b"{", headers={"If-None-Match": etag})
    assert bad.status_code == 400


# Bearer tokens


@pytest.fixture
def secured(released_repo: LibraryRepo) -> Flask:
    return make_app(
        Settings(repo=str(released_repo.path), api_tokens=(API_TOKEN, OTHER_TOKEN), admin_tokens=(ADMIN_TOKEN,))
    )


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", f"Basic {API_TOKEN}", "Bearer wrong-token-0123456789", f"Bearer {API_TOKEN}x",
     f"Bearer {API_TOKEN[:-1]}", f"Bearer {ADMIN_TOKEN}", "Bearer \u00e9\u00e9\u00e9", f"Token {API_TOKEN}"],
)  # fmt: skip
def test_v1_needs_a_valid_token(secured: Flask, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    client = secured.test_client()
    for path in ("/v1/releases", "/v1/agents", "/v1/agents/chat/minimal", "/v1/agents/x/y/z"):
        response = client.get(path, headers=headers)
        assert response.status_code == 401, path
        assert response.mimetype == "application/problem+json"
        assert response.get_json()["type"] == "/problems/unauthorized"
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="prompt-registry"'
    assert client.post("/v1/agents/chat/with_rules/render", json=INPUTS, headers=headers).status_code == 401


@pytest.mark.parametrize("token", [API_TOKEN, OTHER_TOKEN])
def test_any_configured_token_is_accepted(secured: Flask, token: str) -> None:
    client = secured.test_client()
    for scheme in ("Bearer", "bearer"):
        response = client.get("/v1/agents/chat/minimal?release=v1.0.0", headers={"Authorization": f"{scheme} {token}"})
        assert response.status_code == 200
        # Answers to authenticated requests are for the client's own cache only.
        assert response.headers["Cache-Control"] == "private, max-age=31536000, immutable"
        assert response.headers["Vary"] == "Authorization"


def test_probes_metrics_and_the_webhook_stay_open(secured: Flask) -> None:
    client = secured.test_client()
    for path in ("/healthz", "/readyz", "/openapi.json", "/metrics", "/problems/unauthorized"):
        assert client.get(path).status_code == 200, path
    # The webhook has its own secret (and is off here: no remote).
    assert client.post("/v1/hooks/git", data=b"{}").status_code == 404


def test_admin_endpoints_always_need_an_admin_token(released_repo: LibraryRepo, secured: Flask) -> None:
    open_registry = client_for(released_repo)
    for method, path in (("post", "/v1/admin/sync"), ("get", "/v1/admin/cache")):
        response = getattr(open_registry, method)(path)
        assert response.status_code == 401
        assert "REGISTRY_ADMIN_TOKENS" in response.get_json()["detail"]
        api_only = getattr(secured.test_client(), method)(path, headers={"Authorization": f"Bearer {API_TOKEN}"})
        assert api_only.status_code == 401
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    status = secured.test_client().get("/v1/admin/cache", headers=admin)
    assert status.status_code == 200
    assert status.get_json() == {"memory": {"entries": 0, "capacity": 4096}, "redis": None}
    # No remote to fetch from: a clear 404, not a crash.
    assert secured.test_client().post("/v1/admin/sync", headers=admin).status_code == 404


def test_short_tokens_are_refused_at_startup() -> None:
    from registry.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="at least 16"):
        Settings.from_env({"REGISTRY_API_TOKENS": "short, " + API_TOKEN})
    settings = Settings.from_env({"REGISTRY_API_TOKENS": f" {API_TOKEN} ,, {OTHER_TOKEN} "})
    assert settings.api_tokens == (API_TOKEN, OTHER_TOKEN)
    assert API_TOKEN not in repr(settings)


# Metrics


def _sample(app: Flask, name: str, **labels: str) -> float:
    value = app.extensions["prompt_registry.service"].metrics.registry.get_sample_value(name, labels)
    return float(value or 0.0)


def test_metrics_count_requests_by_route_and_status(app: Flask) -> None:
    client = app.test_client()
    for _ in range(3):
        client.get("/v1/agents/chat/minimal?release=v1.0.0")
    client.get("/v1/agents/chat/nope?release=v1.0.0")
    client.open("/v1/agents/chat/minimal", method="BREW")
    client.get("/no/such/" + "x" * 500)
    route = "/v1/agents/<usecase>/<name>"
    assert _sample(app, "prompt_registry_http_requests_total", route=route, method="GET", status="200") == 3
    assert _sample(app, "prompt_registry_http_requests_total", route=route, method="GET", status="404") == 1
    # Label values stay few whatever clients send.
    assert _sample(app, "prompt_registry_http_requests_total", route="unmatched", method="other", status="405") == 1
    assert _sample(app, "prompt_registry_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert _sample(app, "prompt_registry_http_request_duration_seconds_count", route=route) == 4
    assert _sample(app, "prompt_registry_cache_lookups_total", tier="memory", result="hit") == 2
    assert _sample(app, "prompt_registry_cache_lookups_total", tier="memory", result="miss") == 2  # with "nope"
    assert _sample(app, "prompt_registry_git_read_duration_seconds_count") >= 1
    exposition = client.get("/metrics")
    assert exposition.status_code == 200
    assert exposition.content_type.startswith("text/plain; version=0.0.4")
    text = exposition.get_data(as_text=True)
    assert (
        'prompt_registry_http_requests_total{method="GET",route="/v1/agents/<usecase>/<name>",status="200"} 3.0' in text
    )


def test_every_answer_about_releases_varies_by_authorization_when_tokens_are_required(secured: Flask) -> None:
    client = secured.test_client()
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    for path in ("/v1/agents/chat/minimal?release=v1.0.0", "/v1/diff?from=v1.0.0&to=v1.1.0", "/v1/bundle?release=^1"):
        response = client.get(path, headers=headers)
        assert response.status_code == 200, path
        assert response.headers["Cache-Control"].startswith("private, "), path
        assert response.headers["Vary"] == "Authorization", path


def test_a_render_without_if_none_match_still_carries_its_etag_and_revalidates(released_repo: LibraryRepo) -> None:
    client = make_app(Settings(repo=str(released_repo.path))).test_client()
    url = "/v1/agents/chat/with_rules/render?release=v1.1.0"
    first = client.post(url, json=INPUTS)
    assert first.status_code == 200 and first.headers["ETag"].startswith('"render-')
    again = client.post(url, json=INPUTS, headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304 and again.headers["ETag"] == first.headers["ETag"]
