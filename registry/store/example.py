"""The example library as a tagged git repository, for a first look.

``prompt-registry serve --example`` (and ``serve`` with no options outside any
git repository) serves this: the bundled ``library/`` committed twice and
tagged, so that releases, ranges, channels, diffs, ETags and evaluations
behave as they do on a real prompt repository:

    v1.0.0   every usecase but ``assistant``, with the older versions of the
             files under ``library/releases/v1.0.0/`` (support/classify_request
             and support/draft_answer); the eval files of its agents
             (``ai_gateway/evals``) and the judge ``evals/helpfulness``
    v1.1.0   the bundled library as it is: adds ``assistant`` (one agent of
             each type) and its eval files, and changes the two prompts above,
             one for the better and one for the worse, so that
             ``prompt-registry eval --example --base v1.0.0 --head v1.1.0``
             shows a fixed case and a regressed one; ``channels.yml`` maps
             ``production`` to v1.1.0 and ``previous`` to v1.0.0

``library/releases/v1.0.0/`` mirrors ``library/``: a file there takes the
place of the bundled file of the same path in v1.0.0 (or is only in v1.0.0).

Authors, committers and dates are fixed, so the commits, and therefore every
digest and ETag, are the same on every machine for the same library: the
README's examples show real values.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import git

from registry.errors import ConfigurationError
from registry.settings import BUNDLED_LIBRARY

# What the repository holds of the library: its agents and their eval files.
_ROOTS = (Path("ai_gateway", "agents"), Path("ai_gateway", "evals"))
EXAMPLE_RELEASES = ("v1.0.0", "v1.1.0")
# The usecase that v1.1.0 adds to v1.0.0, in both roots.
_ADDED_IN_1_1 = "assistant"
# The files of v1.0.0 that v1.1.0 changed, as they were, in the library's layout.
_OLDER = BUNDLED_LIBRARY / "releases" / EXAMPLE_RELEASES[0]
_AUTHOR = git.Actor("prompt-registry example", "example@prompt-registry.invalid")
# 2026-01-05 and 2026-02-02, 09:00 UTC, in git's own date format.
_DATES = ("1767603600 +0000", "1770022800 +0000")
_CHANNELS = "# Channels: a name for the release each environment runs.\nproduction: v1.1.0\nprevious: v1.0.0\n"
_MESSAGES = (
    "Example library",
    "Add the assistant usecase, one agent of each type; the support classifier sends account access to people"
    " and never follows the message; the support draft answers more warmly",
)


def build_example_repository(target: Path) -> Path:
    """Create the example repository in the empty or missing directory
    ``target``; return its path. ``ConfigurationError`` when git cannot."""
    current = _library_files(BUNDLED_LIBRARY)
    first = {path: source for path, source in current.items() if path.parts[2] != _ADDED_IN_1_1}
    first.update(_library_files(_OLDER))
    try:
        target.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(target, initial_branch="main")
        _commit(repo, _MESSAGES[0], _DATES[0], first)
        repo.create_tag(EXAMPLE_RELEASES[0])
        (target / "channels.yml").write_text(_CHANNELS, encoding="utf-8")
        gone = sorted(set(first) - set(current))
        _commit(repo, _MESSAGES[1], _DATES[1], current, removed=gone, extra=["channels.yml"])
        repo.create_tag(EXAMPLE_RELEASES[1])
        repo.close()
    except (OSError, ValueError, git.GitError) as exc:
        raise ConfigurationError(f"cannot build the example repository in {target}: {exc}") from exc
    return target


def _library_files(library: Path) -> dict[Path, Path]:
    """The files of ``library``'s roots: their path in the repository → the file."""
    found: dict[Path, Path] = {}
    for root in _ROOTS:
        for path in sorted((library / root).rglob("*")):
            if path.is_file():
                found[path.relative_to(library)] = path
    return found


def _commit(
    repo: git.Repo,
    message: str,
    date: str,
    files: Mapping[Path, Path],
    *,
    removed: Sequence[Path] = (),
    extra: Sequence[str] = (),
) -> None:
    """Copy ``files`` (path in the repository → the file) into the repository,
    remove ``removed``, and commit, with ``extra`` files already in place."""
    root = Path(repo.working_tree_dir or ".")
    for relative, source in files.items():
        destination = root / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
        destination.chmod(0o644)  # the same blob mode wherever the package was installed
    for relative in removed:
        (root / relative).unlink()
    # One `git add` for the whole tree: GitPython's index.add starts a git
    # process per file to store its blob, which made `--example` take seconds.
    repo.git.add("--all", "--", *[path.as_posix() for path in _ROOTS], *extra)
    repo.index.commit(message, author=_AUTHOR, committer=_AUTHOR, author_date=date, commit_date=date)
