"""Releases and files of a git repository, read from its object database.

Nothing here checks out, writes, or runs a command per read: GitPython keeps
one long-lived ``git cat-file --batch`` process (``GitCmdObjectDB``) and every
read goes through it. That process serves one request at a time, so reads
are serialised by a lock; everything read is immutable and cached above.
The one exception is a file streamed rather than read whole (an eval
dataset, ``GitTree.open``): it gets a ``git cat-file`` process of its own.

Revisions are never taken from requests: a release is resolved to a commit id
by our own tag listing, and objects are then read by id.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import IO

import git
from cachetools import LRUCache
from gitdb.util import bin_to_hex, hex_to_bin

from registry.errors import ReleaseNotFound, StoreError
from registry.format.versions import parse_version, release_for_tag
from registry.models import Release
from registry.store.channels import ChannelTable
from registry.store.releases import ReleaseIndex
from registry.store.tagmemory import InMemoryTagMemory, TagMemory

log = logging.getLogger(__name__)

_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHORT_COMMIT = re.compile(r"[0-9a-f]{4,39}")
# Branch and tag names an author may give to diff: no revision syntax.
_REF_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")

_BLOB = "blob"
_REGULAR_FILE_MODES = (0o100644, 0o100755)
_TREES_KEPT = 256  # as many as the service keeps catalogs (see serving.service)
# How long after a change to refs/tags its entries are still compared one by one
# (see GitStore._refs_state): far above any file system's clock tick.
_SETTLING_NS = 2_000_000_000
# While it settles, its entries are compared at most this often: each look reads
# every loose tag, and a sync that fetches tags must not charge that per request.
_RESCAN_NS = 250_000_000
# What git for-each-ref says of each tag, reading no object: its name and its
# object's id, NUL-separated.
_TAG_FORMAT = "--format=%(refname)%00%(objectname)"
# A listing of many thousand tags takes well under a second.
_LISTING_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class _Entry:
    binsha: bytes


class GitTree:
    """The agents root of one commit, read lazily.

    A file is found by walking the tree objects along its path, the first
    time it is asked for, so the first request at a release never seen
    before costs a few object reads, not a listing of the whole library; and
    memory grows with the files touched, not with the files in the release.
    The full listing is read only when something needs it (the agents list).
    """

    def __init__(self, store: GitStore, commit: str, root: git.Tree | None) -> None:
        self._store = store
        self._root = root
        self._found: dict[str, _Entry] = {}
        self._listing: dict[str, _Entry] | None = None
        self.commit = commit
        self.content_id = root.hexsha if root is not None else "empty"

    def paths(self) -> Collection[str]:
        if self._listing is None:
            self._listing = self._store.list_files(self._root) if self._root is not None else {}
        return self._listing.keys()

    def size(self, path: str) -> int:
        return self._store.blob_size(self._entry(path).binsha)

    def read(self, path: str) -> bytes:
        return self._store.read_blob(self._entry(path).binsha)

    def object_id(self, path: str) -> str:
        """The git blob id of the file at ``path``: equal ids, equal content."""
        return str(bin_to_hex(self._entry(path).binsha).decode())

    def open(self, path: str) -> AbstractContextManager[IO[bytes]]:
        """The file at ``path`` as a stream, for files too large to hold (a dataset)."""
        return self._store.open_blob(self._entry(path).binsha)

    def _entry(self, path: str) -> _Entry:
        entry = self._found.get(path)
        if entry is None and self._listing is not None:
            entry = self._listing.get(path)
        if entry is None:
            if self._root is None:
                raise KeyError(path)
            # Misses are not remembered: names come from requests, and a
            # flood of made-up ones must not grow memory.
            entry = self._store.find_file(self._root, path)
            self._found[path] = entry
        return entry


class GitStore:
    """A git repository on disk (bare or not), used read-only."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        root: str,
        channels_file: str = "channels.yml",
        tag_memory: TagMemory | None = None,
        observe_read: Callable[[float], None] | None = None,
    ) -> None:
        self.root = root
        self._observe_read = observe_read
        self._tag_memory = tag_memory or InMemoryTagMemory()
        self._moves_reported: set[tuple[str, str]] = set()
        self._channels_file = channels_file
        self._channels: ChannelTable | None = None
        try:
            self._repo = git.Repo(path, odbt=git.GitCmdObjectDB)
        except (git.NoSuchPathError, git.InvalidGitRepositoryError) as exc:
            raise StoreError(f"{path} is not a git repository") from exc
        common = self._repo.common_dir
        self._packed_refs = os.path.join(common, "packed-refs")
        self._tag_refs = os.path.join(common, "refs", "tags")
        # _refs_lock orders index refreshes (so an older listing never replaces
        # a newer one); _lock serialises the cat-file process. Always taken in
        # that order.
        self._refs_lock = threading.Lock()
        self._lock = threading.Lock()
        # The refs as they were at the last listing (see _refs_state); never a state at first.
        self._refs_seen: tuple[object, object] = (None, None)
        # The last look at refs/tags' entries while it settles: when, and what.
        self._tag_entries: tuple[int, frozenset[tuple[str, int]]] = (0, frozenset())
        self._index = ReleaseIndex(())
        # Trees are immutable; an LRU bounds memory when many releases are touched.
        self._trees: LRUCache[str, GitTree] = LRUCache(maxsize=_TREES_KEPT)

    def close(self) -> None:
        """Stop the repository's helper processes."""
        with self._lock:
            self._repo.close()

    def releases(self) -> ReleaseIndex:
        """The release tags as they are on disk now.

        Listing tags reads every ref, so it is redone only when the ref files
        changed (a stat of ``packed-refs`` and ``refs/tags``), which keeps the
        per-request cost to two system calls.
        """
        state = self._refs_state()
        if self._unchanged(state):
            return self._index  # read together: both change under _refs_lock, index first
        with self._refs_lock:
            state = self._refs_state()
            if not self._unchanged(state):
                if not self._settled_as_listed(state):
                    self._index = self._list_releases()
                self._refs_seen = state
            return self._index

    def _unchanged(self, state: tuple[object, object]) -> bool:
        """Whether the refs are as they were at the last listing. The entries
        of ``refs/tags`` count only while it settles (they are None after);
        the first look after it settled compares them once more."""
        marks, entries = state
        seen_marks, seen_entries = self._refs_seen
        if marks != seen_marks:
            return False
        if entries is None:
            # Settled since the last listing, which compared entries: look once
            # more, for a change in the same clock tick that no look caught.
            return seen_entries is None
        return entries is seen_entries or entries == seen_entries

    def channels(self) -> ChannelTable:
        """The channels file at the head of the default branch (``HEAD``), read
        again only when that head moves."""
        try:
            head = git.SymbolicReference.dereference_recursive(self._repo, "HEAD")
        except (ValueError, OSError):  # an unborn branch: no commit yet
            head = None
        cached = self._channels
        if cached is not None and cached.commit == head:
            return cached
        with self._lock:
            data = self._read_path(head, self._channels_file) if head else None
        table = ChannelTable.parse(data, path=self._channels_file, commit=head)
        self._channels = table
        return table

    def revision(self, name: str) -> Release:
        """A branch, tag or full commit id of the repository, as a release to
        read (for authors' commands such as diff; the HTTP API never calls it).

        The name is looked up among the repository's refs, never handed to git
        as revision syntax, so ``HEAD~1``, ``--upload-pack=...`` or ``a..b``
        are simply not found.
        """
        with self._lock:
            commit: str | None = None
            if name == "HEAD":
                try:
                    commit = git.SymbolicReference.dereference_recursive(self._repo, "HEAD")
                except (ValueError, OSError):
                    commit = None
            elif _FULL_COMMIT.fullmatch(name):
                try:
                    commit = git.Commit(self._repo, hex_to_bin(name)).tree.hexsha and name
                except (ValueError, git.GitError, OSError):
                    commit = None
            elif _REF_NAME.fullmatch(name) and ".." not in name and "//" not in name and not name.endswith("/"):
                for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/"):
                    reference = git.Reference(self._repo, prefix + name, check_path=False)
                    try:
                        commit = reference.commit.hexsha  # peels an annotated tag
                        break
                    except (ValueError, OSError, git.GitError):
                        continue
        if commit is None and _SHORT_COMMIT.fullmatch(name):
            # Abbreviations are git revision syntax, which is never used here.
            raise ReleaseNotFound(
                f"{name!r} is not a release, branch or tag; if it is a short commit id, give the full"
                f" 40-character id (git rev-parse {name})",
                release=name,
            )
        if commit is None:
            raise ReleaseNotFound(f"{name!r} is not a release, branch, tag or commit of this repository", release=name)
        return Release(tag=name, version=None, commit=commit)

    def _read_path(self, commit: str, path: str) -> bytes | None:
        """A file of a commit by path, or None; the caller holds ``_lock``."""
        try:
            item = git.Commit(self._repo, hex_to_bin(commit)).tree / path
        except KeyError:
            return None
        except (ValueError, git.GitError, OSError) as exc:
            raise StoreError("cannot read the default branch") from exc
        if item.type != _BLOB:
            return None
        try:
            return bytes(item.data_stream.read())
        except (ValueError, git.GitError, OSError) as exc:
            raise StoreError("cannot read the channels file") from exc

    def tree(self, release: Release, *, root: str | None = None) -> GitTree:
        """The agents root at the release's commit, or the folder ``root`` of
        that commit (the evals root beside it); cached: commits never change."""
        folder = self.root if root is None else root
        key = release.commit if root is None else f"{release.commit}:{folder}"
        with self._lock:
            cached = self._trees.get(key)
            if cached is not None:
                return cached
            try:
                commit = git.Commit(self._repo, hex_to_bin(release.commit))
                found = self._root_tree(commit, folder)
            except (ValueError, git.GitError, OSError) as exc:
                raise StoreError(f"cannot read commit {release.commit} of release {release.tag}") from exc
            tree = GitTree(self, release.commit, found)
            self._trees[key] = tree
            return tree

    @contextmanager
    def _timed(self) -> Iterator[None]:
        """Report how long a read took to ``observe_read`` (metrics)."""
        if self._observe_read is None:
            yield
            return
        started = time.perf_counter()
        try:
            yield
        finally:
            self._observe_read(time.perf_counter() - started)

    def _settled_as_listed(self, state: tuple[object, object]) -> bool:
        """Whether ``refs/tags`` has settled since the last listing with the
        entries that listing saw: then nothing changed, and one look at the
        entries (a ``scandir``) spares listing every tag again."""
        marks, entries = state
        seen_marks, seen_entries = self._refs_seen
        return marks == seen_marks and entries is None and seen_entries == self._scan_tag_entries()

    def _refs_state(self) -> tuple[object, object]:
        """What shows whenever a release tag is added, moved or deleted.

        git rewrites a ref file or ``packed-refs`` by renaming a new file over
        it, which gives the file a new inode and its directory a new
        modification time. A directory's time alone cannot show two changes
        within one tick of the file system's clock, so while ``refs/tags``
        changed less than ``_SETTLING_NS`` ago its entries' inode numbers are
        compared too (one ``scandir``, at most every ``_RESCAN_NS``: a change
        the directory's time missed is seen within that, 250 ms); once it has settled,
        two ``stat`` calls answer, however many tags there are. Release tags
        cannot contain ``/``, so nested tag directories need no look.
        """
        marks: list[object] = []
        try:
            st = os.stat(self._packed_refs)
            marks.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            marks.append(None)
        try:
            st = os.stat(self._tag_refs)
        except FileNotFoundError:
            return tuple(marks), None
        marks.append((st.st_ino, st.st_mtime_ns))
        now = time.time_ns()
        if abs(now - st.st_mtime_ns) >= _SETTLING_NS:
            return tuple(marks), None
        scanned_at, entries = self._tag_entries
        if not 0 <= now - scanned_at < _RESCAN_NS:
            entries = self._scan_tag_entries()
            if entries == self._refs_seen[1]:
                entries = self._refs_seen[1]  # so that each request compares identities, not 10,000 names
            self._tag_entries = (now, entries)
        return tuple(marks), entries

    def _scan_tag_entries(self) -> frozenset[tuple[str, int]]:
        try:
            with os.scandir(self._tag_refs) as entries:
                return frozenset((entry.name, entry.inode()) for entry in entries)
        except FileNotFoundError:
            return frozenset()

    def _list_releases(self) -> ReleaseIndex:
        observed = self._observe_tags()
        first_seen = self._tag_memory.remember(observed)
        releases = []
        for name, commit in observed.items():
            release = release_for_tag(name, first_seen[name])
            if release is None:
                continue
            if commit != first_seen[name]:
                release = replace(release, moved_to=commit)
                if (name, commit) not in self._moves_reported:
                    self._moves_reported.add((name, commit))
                    log.warning(
                        "tag %s was moved from %s to %s; still serving %s (release tags are immutable)",
                        name,
                        first_seen[name],
                        commit,
                        first_seen[name],
                    )
            releases.append(release)
        return ReleaseIndex.from_releases(releases)

    def _observe_tags(self) -> dict[str, str]:
        """The commit of every tag named like a release, in two git
        processes whatever the number of tags: ``for-each-ref`` names every
        tag and its object without reading objects (loose and packed refs
        alike), and one ``cat-file --batch-check`` peels the release tags.

        GitPython read ``packed-refs`` again for every tag it resolved: 32 s
        for 10,000 packed tags, during which every request waited for the new
        listing. As before, a tag not named like a release is never read (it
        may point anywhere, even to nothing); a release tag whose object is
        missing means a broken repository, which is said rather than served
        as "no releases"; one that does not end at a commit is ignored.
        """
        names: dict[str, str] = {}
        for line in self._git_output("for-each-ref", _TAG_FORMAT, "refs/tags").split("\n"):
            # Split on newlines only: ref names may hold U+0085 or U+2028,
            # which str.splitlines would also split on; never a NUL or a newline.
            refname, separator, target = line.partition("\0")
            name = refname.removeprefix("refs/tags/")
            if separator and parse_version(name) is not None:
                names[name] = target
        if not names:
            return {}
        # For each release tag, its object and the object it ends at (^{}
        # peels tags of tags too); object ids come from git, never requests.
        query = "".join(f"{target}\n{target}^{{}}\n" for target in names.values())
        answers = self._git_output("cat-file", "--batch-check", stdin=query).split("\n")
        observed: dict[str, str] = {}
        for index, name in enumerate(names):
            own, peeled = answers[2 * index].split(" "), answers[2 * index + 1].split(" ")
            if own[-1] == "missing":
                log.error("release tag %s points to object %s, which the repository does not have", name, own[0])
                raise StoreError("cannot read the repository's objects")
            if peeled[-1] == "missing" or len(peeled) != 3 or peeled[1] != "commit":
                log.warning("tag %s does not point to a commit; ignored", name)
                continue
            observed[name] = peeled[0]
        return observed

    def _git_output(self, *args: str, stdin: str | None = None) -> str:
        """What a read-only git command prints about this repository."""
        try:
            done = subprocess.run(
                ["git", f"--git-dir={self._repo.git_dir}", *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=_LISTING_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.error("cannot run git %s in %s: %s", args[0], self._repo.git_dir, exc)
            raise StoreError("cannot list the repository's tags") from exc
        if done.returncode != 0:
            log.error("git %s in %s failed: %s", args[0], self._repo.git_dir, done.stderr.strip())
            raise StoreError("cannot list the repository's tags")
        return done.stdout

    def _root_tree(self, commit: git.Commit, folder: str) -> git.Tree | None:
        """The folder of a commit (the agents root), or None when it has none."""
        try:
            root_tree = commit.tree / folder if folder else commit.tree
        except KeyError:
            return None
        return root_tree if root_tree.type == "tree" else None

    def find_file(self, root: git.Tree, path: str) -> _Entry:
        """The regular file at ``path`` under ``root``; ``KeyError`` if there is none.

        Symlinks and submodules are not files of the library.
        """
        if not path or path.startswith("/") or "//" in path:
            raise KeyError(path)
        with self._lock, self._timed():
            try:
                item = root / path
            except KeyError:
                raise KeyError(path) from None
            except (ValueError, git.GitError, OSError) as exc:
                raise StoreError("cannot read a tree from the repository") from exc
        if item.type != _BLOB or item.mode not in _REGULAR_FILE_MODES:
            raise KeyError(path)
        return _Entry(item.binsha)

    def list_files(self, root: git.Tree) -> dict[str, _Entry]:
        """Every regular file under ``root``, by path relative to it."""
        entries: dict[str, _Entry] = {}
        prefix = len(str(root.path)) + 1 if root.path else 0
        with self._lock, self._timed():
            try:
                for item in root.traverse():
                    if isinstance(item, git.Blob) and item.mode in _REGULAR_FILE_MODES:
                        entries[str(item.path)[prefix:]] = _Entry(item.binsha)
            except (ValueError, git.GitError, OSError) as exc:
                raise StoreError("cannot list a tree of the repository") from exc
        return entries

    def blob_size(self, binsha: bytes) -> int:
        """The size of a blob, by object id."""
        with self._lock, self._timed():
            try:
                return int(self._repo.odb.info(binsha).size)
            except (ValueError, git.GitError, OSError) as exc:
                raise StoreError("cannot read an object from the repository") from exc

    @contextmanager
    def open_blob(self, binsha: bytes) -> Iterator[IO[bytes]]:
        """The content of a blob as a stream, read from a ``git cat-file``
        process of its own: the shared one serves a read at a time, and a
        large file read slowly must not hold every other read up."""
        command = ["git", f"--git-dir={self._repo.git_dir}", "cat-file", "blob", bin_to_hex(binsha).decode()]
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError as exc:
            raise StoreError("cannot read an object from the repository") from exc
        assert process.stdout is not None
        try:
            yield process.stdout
        finally:
            process.stdout.close()
            if process.poll() is None:  # the reader stopped early (--limit): the rest is not wanted
                process.kill()
            process.wait()

    def read_blob(self, binsha: bytes) -> bytes:
        """The content of a blob, by object id."""
        with self._lock, self._timed():
            try:
                return bytes(self._repo.odb.stream(binsha).read())
            except (ValueError, git.GitError, OSError) as exc:
                raise StoreError("cannot read an object from the repository") from exc
