"""The interface every source of definitions implements.

A ``Store`` knows the releases and hands out a ``Tree`` for one of them; a
``Tree`` (``registry.format.tree``, the interface definitions are loaded
through) is the agents root at one commit, immutable for as long as anyone
holds it, so that a request answered from one tree is never torn by a change
to the store. Implementations are named after their backend:
``registry.store.git.GitStore`` (a git repository's object database) and
``registry.store.worktree.WorktreeStore`` (a plain directory, for previews).
"""

from __future__ import annotations

from typing import Protocol

from registry.format.tree import Tree
from registry.models import Release
from registry.store.channels import ChannelTable
from registry.store.releases import ReleaseIndex


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
