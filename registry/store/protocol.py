"""The interface every source of definitions implements.

A ``Store`` knows the releases and hands out a ``Tree`` for one of them; a
``Tree`` is the agents root at one commit, immutable for as long as anyone
holds it, so that a request answered from one tree is never torn by a change
to the store. Implementations are named after their backend:
``registry.store.git.GitStore`` (a git repository's object database) and
``registry.store.worktree.WorktreeStore`` (a plain directory, for previews).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from registry.models import Release
from registry.store.channels import ChannelTable
from registry.store.releases import ReleaseIndex


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


class Store(Protocol):
    """A source of releases and their trees."""

    root: str
    """The agents root inside the repository, without leading or trailing "/"."""

    def releases(self) -> ReleaseIndex:
        """The releases as they are now."""

    def tree(self, release: Release) -> Tree:
        """The agents root at ``release``'s commit."""

    def channels(self) -> ChannelTable:
        """The channels file as it is on the default branch now."""

    def close(self) -> None:
        """Release what the store holds open (processes, files)."""
