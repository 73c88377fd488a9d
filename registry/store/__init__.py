"""Reading releases: where definitions come from.

Owns the ``Store`` protocol (its trees are the format's ``Tree``), the git
store and the worktree, the mirror of a remote and its sync, the memory of
tag commits, the release index (versions and ranges themselves are the
format's), channels, which repository a command reads, and the example
library.

May import: ``registry.errors``, ``registry.models``, ``registry.settings``
and ``registry.format`` (a tree's files are definitions). Nothing of
serving, authoring or the CLI.
"""
