"""WorktreeStore: a plain directory served as the release 'worktree'."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from registry.errors import StoreError
from registry.settings import Settings
from registry.store.worktree import WorktreeStore
from tests.conftest import AGENTS, MINIMAL, make_app


def _library(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    (root / AGENTS / "chat").mkdir(parents=True)
    (root / AGENTS / "chat" / "minimal.yml").write_text(MINIMAL)
    return root


@pytest.fixture
def worktree_client(tmp_path: Path) -> FlaskClient:
    return make_app(Settings(worktree=str(_library(tmp_path)))).test_client()


def test_worktree_is_the_only_release_and_the_latest(worktree_client: FlaskClient) -> None:
    body = worktree_client.get("/v1/releases").get_json()
    assert [r["tag"] for r in body["releases"]] == ["worktree"]
    assert body["latest"] == "worktree"
    assert body["releases"][0]["version"] is None
    assert worktree_client.get("/v1/agents/chat/minimal?release=worktree").status_code == 200
    assert worktree_client.get("/v1/agents/chat/minimal?release=v1.0.0").status_code == 404


def test_edits_are_served_at_once_with_a_new_commit_id(tmp_path: Path) -> None:
    library = _library(tmp_path)
    client = make_app(Settings(worktree=str(library))).test_client()
    first = client.get("/v1/agents/chat/minimal").get_json()
    path = library / AGENTS / "chat" / "minimal.yml"
    path.write_text(MINIMAL.replace("helpful", "kind"))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    second = client.get("/v1/agents/chat/minimal").get_json()
    assert second["definition"]["prompt_templates"]["system"] == "You are kind."
    assert second["release"]["commit"] != first["release"]["commit"]
    assert second["digest"] != first["digest"]
    (library / AGENTS / "chat" / "new.yml").write_text(MINIMAL)
    names = [a["name"] for a in client.get("/v1/agents").get_json()["agents"]]
    assert names == ["minimal", "new"]


def test_the_content_hash_depends_only_on_content(tmp_path: Path) -> None:
    one = WorktreeStore(_library(tmp_path / "one"), root=AGENTS).releases().releases[0]
    two = WorktreeStore(_library(tmp_path / "two"), root=AGENTS).releases().releases[0]
    assert one.commit == two.commit


def test_hidden_files_and_symlinks_are_not_served(tmp_path: Path) -> None:
    library = _library(tmp_path)
    (library / AGENTS / "chat" / ".draft.yml").write_text(MINIMAL)
    os.symlink("/etc/passwd", library / AGENTS / "chat" / "passwd.yml")
    store = WorktreeStore(library, root=AGENTS)
    tree = store.tree(store.releases().releases[0])
    assert sorted(tree.paths()) == ["chat/minimal.yml"]


def test_a_missing_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        WorktreeStore(tmp_path / "missing", root=AGENTS)
