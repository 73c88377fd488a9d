"""A plain directory served as one release named ``worktree``.

For authors previewing uncommitted work, and the zero-configuration run that
serves the bundled library. Every call to ``releases`` checks the files'
``stat`` data; when anything changed, the whole agents root is read again
into an immutable in-memory snapshot, so a request that holds a tree is never
torn by an edit. The snapshot's "commit" is a SHA-256 over every path and its
content: it changes exactly when the content does.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Collection
from pathlib import Path

from cachetools import LRUCache

from registry.errors import StoreError
from registry.format.loading import ReleaseCatalog
from registry.format.safeyaml import YamlLimits
from registry.models import WORKTREE_TAG, Release
from registry.store.channels import ChannelTable
from registry.store.releases import ReleaseIndex

# Files larger than this are kept as their size only: the loader refuses them
# by size, so there is no reason to hold their bytes.
_MAX_KEPT_BYTES = 16 * 1024 * 1024


class WorktreeTree:
    """An in-memory snapshot of the agents root."""

    def __init__(self, commit: str, files: dict[str, bytes | int]) -> None:
        self.commit = commit
        self.content_id = commit
        self._files = files

    def paths(self) -> Collection[str]:
        return self._files.keys()

    def size(self, path: str) -> int:
        content = self._files[path]
        return content if isinstance(content, int) else len(content)

    def read(self, path: str) -> bytes:
        content = self._files[path]
        if isinstance(content, int):
            raise KeyError(path)
        return content


class WorktreeStore:
    """A directory whose agents root is re-read whenever a file changes."""

    def __init__(self, directory: str | os.PathLike[str], *, root: str) -> None:
        self.root = root
        self._base = Path(directory)
        if not self._base.is_dir():
            raise StoreError(f"{directory} is not a directory")
        self._lock = threading.Lock()
        self._stamp: tuple[object, ...] | None = None
        # A few recent snapshots, so that a request resolved just before an
        # edit still reads the content its release names.
        self._snapshots: LRUCache[str, WorktreeTree] = LRUCache(maxsize=4)
        self._index = ReleaseIndex(())

    def close(self) -> None:
        """Nothing to release; here for symmetry with ``GitStore``."""

    def channels(self) -> ChannelTable:
        """None: a worktree is a single release, with nothing to choose between."""
        return ChannelTable(path="channels.yml", commit=None)

    def releases(self) -> ReleaseIndex:
        """The single ``worktree`` release, re-read if any file changed."""
        with self._lock:
            stamp = self._scan_stamp()
            if stamp != self._stamp:
                tree = self._snapshot()
                self._snapshots[tree.commit] = tree
                release = Release(tag=WORKTREE_TAG, version=None, commit=tree.commit)
                self._index = ReleaseIndex((release,))
                self._stamp = stamp
            return self._index

    def tree(self, release: Release) -> WorktreeTree:
        """The snapshot ``release`` was resolved from."""
        with self._lock:
            tree = self._snapshots.get(release.commit)
        if tree is None:
            raise StoreError("the working tree changed during the request; try again")
        return tree

    def _files(self) -> list[tuple[str, str, os.stat_result]]:
        """(relative path, absolute path, stat) of every regular file, sorted.

        ``os.scandir`` rather than ``pathlib``: this runs on every request,
        and costs one ``stat`` per file this way.
        """
        top = os.path.join(self._base, self.root) if self.root else str(self._base)
        found: list[tuple[str, str, os.stat_result]] = []
        pending = [("", top)]
        while pending:
            prefix, directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.is_symlink():
                    continue
                relative = prefix + entry.name
                if entry.is_dir(follow_symlinks=False):
                    pending.append((relative + "/", entry.path))
                elif entry.is_file(follow_symlinks=False):
                    try:
                        found.append((relative, entry.path, entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue
        found.sort()
        return found

    def _scan_stamp(self) -> tuple[object, ...]:
        return tuple((relative, st.st_mtime_ns, st.st_size, st.st_ino) for relative, _, st in self._files())

    def _snapshot(self) -> WorktreeTree:
        digest = hashlib.sha256()
        files: dict[str, bytes | int] = {}
        for relative, path, st in self._files():
            try:
                content: bytes | int = st.st_size if st.st_size > _MAX_KEPT_BYTES else Path(path).read_bytes()
            except OSError:
                continue
            files[relative] = content
            digest.update(relative.encode() + b"\0")
            digest.update(content if isinstance(content, bytes) else f"size:{content}".encode())
            digest.update(b"\0")
        return WorktreeTree(digest.hexdigest(), files)


def open_worktree_catalog(base: Path, agents_root: str, limits: YamlLimits) -> ReleaseCatalog:
    """The catalog of a working tree, as the registry would serve it."""
    store = WorktreeStore(base, root=agents_root)
    tree = store.tree(store.releases().releases[0])
    return ReleaseCatalog(tree, root=agents_root, yaml_limits=limits)
