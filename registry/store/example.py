"""The example library as a tagged git repository, for a first look.

``prompt-registry serve --example`` (and ``serve`` with no options outside any
git repository) serves this: the bundled ``library/`` committed twice and
tagged, so that releases, ranges, channels, diffs and ETags behave as they do
on a real prompt repository:

    v1.0.0   every usecase but ``assistant``
    v1.1.0   adds ``assistant`` (one agent of each type); ``channels.yml``
             maps ``production`` to v1.1.0 and ``previous`` to v1.0.0

Authors, committers and dates are fixed, so the commits, and therefore every
digest and ETag, are the same on every machine for the same library: the
README's examples show real values.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import git

from registry.errors import ConfigurationError
from registry.settings import BUNDLED_LIBRARY

_AGENTS = Path("ai_gateway", "agents")
EXAMPLE_RELEASES = ("v1.0.0", "v1.1.0")
# The usecase that v1.1.0 adds to v1.0.0.
_ADDED_IN_1_1 = "assistant"
_AUTHOR = git.Actor("prompt-registry example", "example@prompt-registry.invalid")
# 2026-01-05 and 2026-02-02, 09:00 UTC, in git's own date format.
_DATES = ("1767603600 +0000", "1770022800 +0000")
_CHANNELS = "# Channels: a name for the release each environment runs.\nproduction: v1.1.0\nprevious: v1.0.0\n"


def build_example_repository(target: Path) -> Path:
    """Create the example repository in the empty or missing directory
    ``target``; return its path. ``ConfigurationError`` when git cannot."""
    source = BUNDLED_LIBRARY / _AGENTS
    files = [path.relative_to(source) for path in sorted(source.rglob("*")) if path.is_file()]
    try:
        target.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(target, initial_branch="main")
        _commit(repo, "Example library", _DATES[0], [f for f in files if f.parts[0] != _ADDED_IN_1_1])
        repo.create_tag(EXAMPLE_RELEASES[0])
        (target / "channels.yml").write_text(_CHANNELS, encoding="utf-8")
        added = [f for f in files if f.parts[0] == _ADDED_IN_1_1]
        _commit(repo, "Add the assistant usecase: one agent of each type", _DATES[1], added, extra=["channels.yml"])
        repo.create_tag(EXAMPLE_RELEASES[1])
        repo.close()
    except (OSError, ValueError, git.GitError) as exc:
        raise ConfigurationError(f"cannot build the example repository in {target}: {exc}") from exc
    return target


def _commit(repo: git.Repo, message: str, date: str, files: list[Path], *, extra: Sequence[str] = ()) -> None:
    """Copy ``files`` (relative to the bundled agents root) into the
    repository and commit them, with ``extra`` files already in place."""
    root = Path(repo.working_tree_dir or ".")
    for relative in files:
        destination = root / _AGENTS / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(BUNDLED_LIBRARY / _AGENTS / relative, destination)
        destination.chmod(0o644)  # the same blob mode wherever the package was installed
    repo.index.add([(_AGENTS / relative).as_posix() for relative in files] + list(extra))
    repo.index.commit(message, author=_AUTHOR, committer=_AUTHOR, author_date=date, commit_date=date)
