"""GitStore against real repositories: tags, trees, blobs, concurrency."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from registry.errors import StoreError
from registry.store.git import GitStore
from tests.conftest import AGENTS, MINIMAL, LibraryRepo


def test_only_semver_tags_are_releases(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    for tag in ("v1.0.0", "1.1.0", "v2.0.0-rc.1", "v1.0.0+build.7", "release-3", "v1.2", "latest", "v01.0.0"):
        repo.tag(tag)
    store = GitStore(repo.path, root=AGENTS)
    assert [r.tag for r in store.releases().releases] == ["v2.0.0-rc.1", "1.1.0", "v1.0.0+build.7", "v1.0.0"]


def test_releases_are_ordered_by_semver_precedence_not_text(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    tags = [
        "v1.0.0-alpha",
        "v1.0.0-alpha.1",
        "v1.0.0-alpha.beta",
        "v1.0.0-beta",
        "v1.0.0-beta.2",
        "v1.0.0-beta.11",
        "v1.0.0-rc.1",
        "v1.0.0",
        "v1.9.0",
        "v1.10.0",
        "v10.0.0",
    ]
    for tag in reversed(tags):
        repo.tag(tag)
    releases = GitStore(repo.path, root=AGENTS).releases()
    assert [r.tag for r in releases.releases] == list(reversed(tags))
    assert releases.latest is not None and releases.latest.tag == "v10.0.0"


def test_annotated_tags_resolve_to_their_commit(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    commit = repo.commit()
    repo.tag("v1.0.0", annotated=True)
    (release,) = GitStore(repo.path, root=AGENTS).releases().releases
    assert release.commit == commit


def test_a_tag_on_a_tree_is_ignored(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    tree = repo.git("rev-parse", "HEAD^{tree}")
    repo.tag("v1.0.0")
    repo.git("tag", "v2.0.0", tree)
    assert [r.tag for r in GitStore(repo.path, root=AGENTS).releases().releases] == ["v1.0.0"]


def _tagged_in_the_tick_of_a_listing(repo: LibraryRepo) -> GitStore:
    """A store that listed v1.0.0, then v1.1.0 tagged within the same tick of
    a file system clock that did not move: nothing but the entries differ."""
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    repo.tag("v1.0.0")
    tags = os.path.join(repo.path, ".git", "refs", "tags")
    tick = time.time_ns()
    os.utime(tags, ns=(tick, tick))
    store = GitStore(repo.path, root=AGENTS)
    assert [r.tag for r in store.releases().releases] == ["v1.0.0"]
    repo.tag("v1.1.0")
    os.utime(tags, ns=(tick, tick))
    return store


def test_a_change_within_one_tick_of_the_directory_clock_is_seen_soon(repo: LibraryRepo) -> None:
    """A file system whose clock did not move between two changes to refs/tags
    leaves the directory's times as they were: the entries show the change."""
    store = _tagged_in_the_tick_of_a_listing(repo)
    deadline = time.monotonic() + 10
    while [r.tag for r in store.releases().releases] != ["v1.1.0", "v1.0.0"]:
        assert time.monotonic() < deadline, "a tag made within one clock tick was never seen"
        time.sleep(0.05)


def test_a_tag_of_a_tag_resolves_to_the_commit_at_the_end(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    commit = repo.commit()
    repo.tag("v1.0.0", annotated=True)
    repo.git("-c", "advice.nestedTag=false", "tag", "-a", "-m", "again", "v1.0.1", "v1.0.0")
    repo.git("tag", "-a", "-m", "on a tree", "v3.0.0", "HEAD^{tree}")
    store = GitStore(repo.path, root=AGENTS)
    try:
        releases = store.releases().releases
    finally:
        store.close()  # peeling the nested tag started git's object reader
    assert [(r.tag, r.commit) for r in releases] == [("v1.0.1", commit), ("v1.0.0", commit)]


def test_loose_and_packed_tags_are_listed_alike(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    for minor in range(30):
        repo.tag(f"v1.{minor}.0", annotated=minor % 2 == 0)
    repo.git("pack-refs", "--all")
    for minor in range(30, 40):
        repo.tag(f"v1.{minor}.0", annotated=minor % 2 == 0)
    repo.git("tag", "-d", "v1.3.0")  # deleted from packed-refs
    tags = [r.tag for r in GitStore(repo.path, root=AGENTS).releases().releases]
    assert tags == [f"v1.{minor}.0" for minor in reversed(range(40)) if minor != 3]


def test_a_tag_whose_object_is_missing_is_a_store_error(repo: LibraryRepo) -> None:
    """A broken repository says so, rather than serving "no releases"."""
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    repo.tag("v1.0.0", annotated=True)
    tag_object = repo.git("rev-parse", "v1.0.0")
    os.remove(os.path.join(repo.path, ".git", "objects", tag_object[:2], tag_object[2:]))
    with pytest.raises(StoreError, match="cannot read the repository's objects"):
        GitStore(repo.path, root=AGENTS).releases()


def test_tags_that_are_not_releases_are_never_read(repo: LibraryRepo) -> None:
    """Whatever a tag not named like a release holds (an odd name, an object
    the repository lacks), the releases are listed; so are release tags
    that do not end at a commit, ignored."""
    repo.write("a/b.yml", MINIMAL)
    commit = repo.commit()
    repo.tag("v1.0.0", annotated=True)
    # Names str.splitlines would cut in two; the second piece of the last
    # would read as a release tag of its own.
    for odd in ("x\u0085y", "z\u2028w", "p\u2029q", "x\u2028refs/tags/v9.9.9"):
        repo.git("tag", odd)
    tags = os.path.join(repo.path, ".git", "refs", "tags")
    with open(os.path.join(tags, "nightly"), "w") as dangling:
        dangling.write("1" * 40 + "\n")
    repo.git("tag", "v2.0.0", "HEAD^{tree}")
    assert [(r.tag, r.commit) for r in GitStore(repo.path, root=AGENTS).releases().releases] == [("v1.0.0", commit)]


def test_a_tag_change_in_the_clock_tick_of_the_last_listing_is_seen_once_settled(repo: LibraryRepo) -> None:
    """No request looked at refs/tags while it settled: the first look after
    compares the entries once more, and finds what the directory's times hid."""
    store = _tagged_in_the_tick_of_a_listing(repo)
    time.sleep(2.2)  # refs/tags settles (2 s) with no request looking
    assert [r.tag for r in store.releases().releases] == ["v1.1.0", "v1.0.0"]


def test_new_tags_are_seen_without_restarting(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    repo.tag("v1.0.0")
    store = GitStore(repo.path, root=AGENTS)
    assert [r.tag for r in store.releases().releases] == ["v1.0.0"]
    repo.commit("more")
    repo.tag("v1.1.0")
    assert [r.tag for r in store.releases().releases] == ["v1.1.0", "v1.0.0"]
    repo.git("pack-refs", "--all")
    repo.tag("v1.2.0")
    assert [r.tag for r in store.releases().releases] == ["v1.2.0", "v1.1.0", "v1.0.0"]


def test_tags_changed_after_the_tag_directory_settled_are_seen(repo: LibraryRepo) -> None:
    """Once refs/tags has not changed for a while, the store looks only at the
    directory's own times: every kind of change must still show."""
    repo.write("a/b.yml", MINIMAL)
    first = repo.commit()
    repo.tag("v1.0.0")
    second = repo.commit("more")
    tags = os.path.join(repo.path, ".git", "refs", "tags")

    def settle() -> None:
        long_ago = os.stat(tags).st_mtime_ns - 60 * 10**9
        os.utime(tags, ns=(long_ago, long_ago))

    store = GitStore(repo.path, root=AGENTS)
    settle()
    assert [r.tag for r in store.releases().releases] == ["v1.0.0"]
    repo.tag("v1.1.0")
    assert [r.tag for r in store.releases().releases] == ["v1.1.0", "v1.0.0"]
    settle()
    assert [r.tag for r in store.releases().releases] == ["v1.1.0", "v1.0.0"]
    repo.git("tag", "-d", "v1.1.0")
    assert [r.tag for r in store.releases().releases] == ["v1.0.0"]
    settle()
    before = store.releases()
    assert store.releases() is before  # nothing changed: the listing is not redone
    repo.git("tag", "-f", "v1.0.0", second)
    # A moved tag is listed again (the tag memory then keeps its first commit).
    after = store.releases()
    assert after is not before
    assert [r.commit for r in after.releases] == [first]


def test_tree_lists_only_regular_files_under_the_root(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.write("_partials/p.jinja", "partial")
    repo.write("outside.yml", "name: x", under_agents=False)
    os.symlink("/etc/passwd", repo.path / AGENTS / "a" / "link.yml")
    repo.commit()
    repo.tag("v1.0.0")
    store = GitStore(repo.path, root=AGENTS)
    tree = store.tree(store.releases().releases[0])
    assert sorted(tree.paths()) == ["_partials/p.jinja", "a/b.yml"]
    assert tree.read("a/b.yml") == MINIMAL.encode()
    assert tree.size("a/b.yml") == len(MINIMAL.encode())
    with pytest.raises(KeyError):
        tree.read("a/link.yml")


def test_a_release_without_the_agents_root_has_no_files(repo: LibraryRepo) -> None:
    repo.write("README", "nothing here", under_agents=False)
    repo.commit()
    repo.tag("v1.0.0")
    store = GitStore(repo.path, root=AGENTS)
    assert list(store.tree(store.releases().releases[0]).paths()) == []


def test_reads_never_touch_the_working_tree(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    repo.tag("v1.0.0")
    repo.write("a/b.yml", "uncommitted edit")
    store = GitStore(repo.path, root=AGENTS)
    assert store.tree(store.releases().releases[0]).read("a/b.yml") == MINIMAL.encode()
    assert repo.git("status", "--porcelain") == "M ai_gateway/agents/a/b.yml"


def test_another_folder_of_a_release_is_read_with_blob_ids_and_streamed(repo: LibraryRepo) -> None:
    repo.write("a/b.yml", MINIMAL)
    dataset = "cases:\n" + "".join(f"  - id: c{n}\n" for n in range(20_000))
    repo.write("ai_gateway/evals/a/b.yml", dataset, under_agents=False)
    repo.commit()
    repo.tag("v1.0.0")
    store = GitStore(repo.path, root=AGENTS)
    release = store.releases().releases[0]
    evals = store.tree(release, root="ai_gateway/evals")
    assert list(evals.paths()) == ["a/b.yml"] and list(store.tree(release).paths()) == ["a/b.yml"]
    assert evals.object_id("a/b.yml") == repo.git("rev-parse", "v1.0.0:ai_gateway/evals/a/b.yml")
    with evals.open("a/b.yml") as stream:
        assert stream.read(16) == b"cases:\n  - id: c0"[:16]
    with evals.open("a/b.yml") as stream:
        assert stream.read() == dataset.encode()


def test_a_bare_repository_is_served(repo: LibraryRepo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    repo.write("a/b.yml", MINIMAL)
    repo.commit()
    repo.tag("v1.0.0")
    bare = tmp_path / "bare.git"
    repo.git("clone", "-q", "--bare", str(repo.path), str(bare))
    store = GitStore(bare, root=AGENTS)
    assert store.tree(store.releases().releases[0]).read("a/b.yml") == MINIMAL.encode()


def test_not_a_repository_is_a_store_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StoreError):
        GitStore(tmp_path, root=AGENTS)
    with pytest.raises(StoreError):
        GitStore(tmp_path / "missing", root=AGENTS)


def test_concurrent_reads_of_many_releases_are_consistent(repo: LibraryRepo) -> None:
    expected = {}
    for index in range(6):
        content = MINIMAL.replace("helpful", f"helpful #{index}")
        repo.write("a/b.yml", content)
        repo.commit(f"version {index}")
        repo.tag(f"v1.{index}.0")
        expected[f"v1.{index}.0"] = content.encode()
    store = GitStore(repo.path, root=AGENTS)
    releases = store.releases().releases
    barrier = threading.Barrier(8)

    def read_all(worker: int) -> bool:
        barrier.wait()
        for round_ in range(30):
            release = releases[(worker + round_) % len(releases)]
            if store.tree(release).read("a/b.yml") != expected[release.tag]:
                return False
        return True

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            assert all(pool.map(read_all, range(8)))
    finally:
        store.close()
