"""Which prompt library a command reads: one rule for every command.

    --repo PATH, else REGISTRY_REPO, else the git repository (a checkout or a
    bare repository) holding the current directory.

Found from the current directory, the library's agents root is the
``ai_gateway/agents`` nearest to it, between it and the repository's top: a
library kept in a subdirectory of a larger repository (``prompts/ai_gateway/
agents``) is read there by every command, files and releases alike. A root
given with ``--root`` or ``REGISTRY_ROOT`` is taken as it is.

Imports nothing of the registry but errors and settings: the CLI decides
with it before any store is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from registry.errors import ConfigurationError
from registry.settings import DEFAULT_ROOT, environment_for


@dataclass(frozen=True)
class Library:
    """A repository (or plain directory) and the agents root inside it."""

    path: str
    root: str | None
    """The agents root relative to ``path``; None for the configured default."""


def find_library(explicit: str | None = None, *, root: str | None = None) -> Library | None:
    """The library a command reads (see the module's docstring), or None
    when none is given and the current directory is in no repository.

    ``explicit`` is ``--repo`` (None when not given); ``root`` is ``--root``
    or ``REGISTRY_ROOT``. ``ConfigurationError`` when a given path is empty
    or not a directory, naming where it came from.
    """
    if explicit is not None:
        return Library(existing_directory(explicit, "--repo"), root)
    for variable, configured in environment_for("repo").items():
        if configured.strip():
            return Library(existing_directory(configured.strip(), variable), root)
    here = Path.cwd()
    for directory in (here, *here.parents):
        if is_repository(directory):
            return Library(str(directory), root or _nearest_agents_root(here, directory))
    return None


def configured_root(option: str | None) -> str | None:
    """``--root``, else ``REGISTRY_ROOT``, else None."""
    return option or next(iter(environment_for("root").values()), "").strip() or None


def is_repository(directory: Path) -> bool:
    """Whether ``directory`` is the top of a git checkout or a bare repository."""
    if (directory / ".git").exists():
        return True
    return (directory / "HEAD").is_file() and (directory / "objects").is_dir() and (directory / "refs").is_dir()


def existing_directory(path: str, source: str) -> str:
    """``path``, when it names a directory; else ``ConfigurationError``
    naming ``source`` (where the path came from)."""
    if not path.strip():
        raise ConfigurationError(f"{source} is empty: give the path of a prompt library")
    if not Path(path).is_dir():
        raise ConfigurationError(f"{source} {path!r} is not a directory")
    return path


def _nearest_agents_root(here: Path, top: Path) -> str | None:
    """The agents root nearest ``here`` on the way up to ``top``, relative to
    ``top``; None when it is ``top``'s own or there is none."""
    for directory in (here, *here.parents):
        if directory == top:
            return None
        if (directory / DEFAULT_ROOT).is_dir():
            return (directory.relative_to(top) / DEFAULT_ROOT).as_posix()
    return None
