"""Release tags are immutable: the first-seen commit is served, moves are reported."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from registry.errors import StoreError
from registry.store.tagmemory import FileTagMemory, InMemoryTagMemory
from tests.conftest import MINIMAL, LibraryRepo, client_for


def _move_tag(repo: LibraryRepo, tag: str, content: str) -> str:
    repo.write("chat/minimal.yml", content)
    commit = repo.commit("rewrite history")
    repo.git("tag", "-f", tag, commit)
    return commit


def test_a_force_moved_tag_keeps_serving_its_first_commit(repo: LibraryRepo, caplog: pytest.LogCaptureFixture) -> None:
    client = client_for(repo.release("v1.0.0", {"chat/minimal.yml": MINIMAL}))
    first = repo.git("rev-parse", "v1.0.0")
    assert client.get("/v1/agents/chat/minimal?release=v1.0.0").headers["X-Registry-Commit"] == first
    with caplog.at_level(logging.WARNING):
        moved = _move_tag(repo, "v1.0.0", MINIMAL.replace("helpful", "sneaky"))
        response = client.get("/v1/agents/chat/minimal?release=v1.0.0")
    assert response.headers["X-Registry-Commit"] == first
    assert response.get_json()["definition"]["prompt_templates"]["system"] == "You are helpful."
    (release,) = client.get("/v1/releases").get_json()["releases"]
    assert (release["commit"], release["moved"], release["moved_to"]) == (first, True, moved)
    assert any("tag v1.0.0 was moved" in r.message for r in caplog.records)


def test_with_a_data_dir_the_memory_survives_a_restart(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"chat/minimal.yml": MINIMAL})
    first = repo.git("rev-parse", "v1.0.0")
    data = tmp_path / "data"
    client_for(repo, data_dir=str(data)).get("/v1/releases")
    _move_tag(repo, "v1.0.0", MINIMAL.replace("helpful", "sneaky"))
    restarted = client_for(repo, data_dir=str(data))
    assert restarted.get("/v1/agents/chat/minimal?release=v1.0.0").headers["X-Registry-Commit"] == first
    assert json.loads((data / "tags.json").read_text())["tags"] == {"v1.0.0": first}


def test_without_a_data_dir_a_new_process_starts_from_what_it_sees(repo: LibraryRepo) -> None:
    repo.release("v1.0.0", {"chat/minimal.yml": MINIMAL})
    client_for(repo).get("/v1/releases")
    moved = _move_tag(repo, "v1.0.0", MINIMAL.replace("helpful", "sneaky"))
    assert client_for(repo).get("/v1/agents/chat/minimal?release=v1.0.0").headers["X-Registry-Commit"] == moved


def test_a_deleted_tag_stops_being_listed_and_keeps_its_memory(repo: LibraryRepo) -> None:
    client = client_for(repo.release("v1.0.0", {"chat/minimal.yml": MINIMAL}))
    first = repo.git("rev-parse", "v1.0.0")
    client.get("/v1/releases")
    repo.git("tag", "-d", "v1.0.0")
    assert client.get("/v1/releases").get_json()["releases"] == []
    assert client.get("/v1/agents?release=v1.0.0").status_code == 404
    _move_tag(repo, "v1.0.0", MINIMAL.replace("helpful", "sneaky"))
    (release,) = client.get("/v1/releases").get_json()["releases"]
    assert release["commit"] == first and release["moved"] is True


def test_a_corrupt_memory_file_is_store_unavailable_and_names_no_path(repo: LibraryRepo, tmp_path: Path) -> None:
    repo.release("v1.0.0", {"chat/minimal.yml": MINIMAL})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tags.json").write_text("{not json")
    response = client_for(repo, data_dir=str(tmp_path / "data")).get("/v1/releases")
    assert response.status_code == 503
    assert response.get_json(force=True)["type"] == "/problems/store-unavailable"
    assert str(tmp_path) not in response.get_data(as_text=True)


def test_in_memory_tag_memory_keeps_the_first_commit() -> None:
    memory = InMemoryTagMemory()
    assert memory.remember({"v1": "a"}) == {"v1": "a"}
    assert memory.remember({"v1": "b", "v2": "c"}) == {"v1": "a", "v2": "c"}


def test_an_unwritable_data_dir_fails_at_startup(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError):
        FileTagMemory(blocker / "data")
