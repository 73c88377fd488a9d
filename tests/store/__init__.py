"""Unit tests of registry.store: git, releases, channels, mirrors, worktrees, tag memory."""
