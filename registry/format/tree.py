"""What definitions are read from: the files of an agents root at one commit.

Loading reads a ``Tree``; the store (``registry.store.protocol.Store``) hands
one out per release, so the format depends on this interface and never on a
backend.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol


class Tree(Protocol):
    """The files under the agents root at one commit."""

    @property
    def commit(self) -> str:
        """The commit (or, for a worktree, the content hash) the files are at."""

    @property
    def content_id(self) -> str:
        """An id that changes whenever any file under the root changes."""

    def paths(self) -> Collection[str]:
        """Every regular file, as a ``/``-separated path relative to the root."""

    def size(self, path: str) -> int:
        """The file's size in bytes, known without reading it.

        Raises ``KeyError`` when there is no such file.
        """

    def read(self, path: str) -> bytes:
        """The file's bytes. Raises ``KeyError`` when there is no such file."""
