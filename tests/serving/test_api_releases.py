"""Release ranges, channels and waiting for new releases, through the HTTP API."""

from __future__ import annotations

import json
import threading
import time

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from registry.settings import Settings
from tests.conftest import MINIMAL, LibraryRepo, client_for, make_app
from tests.support.openapi_check import problem

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
    body = problem(client.get("/v1/agents/chat/minimal?release=^3.0.0"), 404, "release-not-found")
    assert body["requested"] == "^3.0.0"
    assert body["available"] == ["v2.0.0-rc.1", "v1.1.0", "v1.0.0"]


@pytest.mark.parametrize("release", ["^" + "1" * 10_000, " || ".join(["^1.0.0"] * 200), "||" * 2000, "^1.2 <"])
def test_malformed_and_enormous_ranges_are_invalid_requests(client: FlaskClient, release: str) -> None:
    body = problem(client.get("/v1/agents", query_string={"release": release}), 400, "invalid-request")
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
    body = problem(client.get("/v1/agents?release=@production"), 404, "release-not-found")
    assert body["target"] == "v9.0.0"
    assert "matches no release" in client.get("/v1/releases").get_json()["channels"]["production"]["error"]


@pytest.mark.parametrize("text", ["production: [v1\n", "- v1.0.0\n", "production: v1.0.0\nproduction: v1.1.0\n"])
def test_an_invalid_channels_file_is_reported_and_no_channel_resolves(released_repo: LibraryRepo, text: str) -> None:
    _with_channels(released_repo, text)
    client = client_for(released_repo)
    releases = client.get("/v1/releases").get_json()
    assert releases["channel_errors"][0]["file"] == "channels.yml"
    problem(client.get("/v1/agents?release=@production"), 404, "release-not-found")
    assert client.get("/v1/agents?release=v1.0.0").status_code == 200


def test_no_channels_file_means_no_channels(client: FlaskClient) -> None:
    assert client.get("/v1/releases").get_json()["channels"] == {}
    body = problem(client.get("/v1/agents?release=@production"), 404, "release-not-found")
    assert "no channels.yml" in body["detail"]


def test_the_channels_file_path_is_configurable(released_repo: LibraryRepo) -> None:
    released_repo.write("deploy/channels.yaml", "production: v1.0.0\n", under_agents=False)
    released_repo.commit("channels elsewhere")
    client = client_for(released_repo, channels_file="deploy/channels.yaml")
    assert client.get("/v1/agents?release=@production").headers["X-Registry-Release"] == "v1.0.0"


@pytest.mark.parametrize("release", ["@", "@../production", "@a/b", "@Production", "@prod%00", "@" + "a" * 65, "@@x"])
def test_channel_names_with_path_characters_are_invalid_requests(client: FlaskClient, release: str) -> None:
    problem(client.get("/v1/agents", query_string={"release": release}), 400, "invalid-request")


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
