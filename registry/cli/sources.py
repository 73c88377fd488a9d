"""Which library a command reads, and the settings it opens the store with.

The rule is the same for every command: ``--repo PATH``, else
``REGISTRY_REPO``, else the git checkout that holds the current directory.
Commands that read files rather than releases fall back to the current
directory when there is no checkout; ``serve`` falls back to the bundled
example; the others stop with a message saying where they looked.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from registry.errors import ConfigurationError
from registry.settings import Settings, environment_for
from registry.store.checkout import Library, configured_root, existing_directory, find_library

if TYPE_CHECKING:
    from registry.serving.service import RegistryService


LIBRARY_HELP = "the prompt library, a git checkout (default: the one holding the current directory) [REGISTRY_REPO]"
_NOT_IN_A_LIBRARY = (
    "no prompt library here: {cwd} is not inside a git checkout; run this inside one, or give --repo PATH"
    " (or REGISTRY_REPO)"
)


def add_source_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that reads a library's releases: where the
    library is, and how the store reads it."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--repo", metavar="PATH", help=LIBRARY_HELP)
    source.add_argument(
        "--worktree", metavar="DIR", help="plain directory served as one release named 'worktree' [REGISTRY_WORKTREE]"
    )
    source.add_argument("--remote", metavar="URL", help="git URL to mirror and serve [REGISTRY_REMOTE]")
    source.add_argument(
        "--example",
        action="store_true",
        help="the bundled example library, as a temporary git repository tagged v1.0.0 and v1.1.0",
    )
    parser.add_argument("--root", help="agents root inside the repository (default ai_gateway/agents) [REGISTRY_ROOT]")
    parser.add_argument(
        "--channels-file", help="channels file on the default branch (default channels.yml) [REGISTRY_CHANNELS_FILE]"
    )
    parser.add_argument(
        "--data-dir", help="where to remember the commit each tag was first seen at [REGISTRY_DATA_DIR]"
    )


def required_library(explicit: str | None, root: str | None) -> Library:
    library = find_library(explicit, root=root)
    if library is None:
        raise ConfigurationError(_NOT_IN_A_LIBRARY.format(cwd=Path.cwd()))
    return library


def files_library(args: argparse.Namespace) -> Library:
    """The library of a command that reads files, not releases: the
    current directory too when it is in no repository."""
    root = configured_root(args.root)
    if args.path:
        return Library(existing_directory(args.path, "PATH"), root)
    return find_library(args.repo, root=root) or Library(".", root)


def command_settings(
    args: argparse.Namespace, stack: ExitStack, *, release: bool = True, serve_example: bool = False, **extra: Any
) -> Settings:
    """Settings for a command that reads the store: the releases of the
    library (``release``) or its files. With ``serve_example`` (``serve``),
    no library found means the bundled example, and the log says so."""
    data_dir = args.data_dir
    environment = environment_for("remote", "data_dir", "worktree")
    if (args.remote or environment.get("REGISTRY_REMOTE")) and not (data_dir or environment.get("REGISTRY_DATA_DIR")):
        data_dir = stack.enter_context(_temporary_directory("prompt-registry-mirror-"))
        logging.getLogger("registry").warning(
            "no --data-dir: mirroring into %s (removed at exit), and tag memory will not survive a restart", data_dir
        )
    repo, worktree, remote = args.repo, args.worktree, args.remote
    root = configured_root(args.root)
    if repo is not None:
        repo = required_library(repo, root).path  # refuses an empty or missing path, naming --repo
    chosen = any((repo, worktree, remote)) or any(
        environment.get(variable, "").strip() for variable in ("REGISTRY_WORKTREE", "REGISTRY_REMOTE")
    )
    found = None if chosen or args.example else find_library(root=root)
    if args.example or (found is None and not chosen and serve_example):
        # Every other setting is checked before the example is built.
        Settings.from_env(repo="", worktree="", remote="", root=root, channels_file=args.channels_file, **extra)
        repo = _example_repository(stack)
        if serve_example:
            logging.getLogger("registry").info(
                "serving the bundled example library%s: a temporary git repository at %s, tagged v1.0.0 and v1.1.0",
                "" if args.example else " (not inside a git checkout, and no --repo)",
                repo,
            )
    elif not chosen:
        if found is None and release:
            raise ConfigurationError(_NOT_IN_A_LIBRARY.format(cwd=Path.cwd()))
        repo, root = (found.path, found.root) if found else (".", root)
    if not release and repo:
        repo, worktree = None, repo
    # A source given on the command line replaces the other ones' environment
    # variables ("" clears one; None means "not given").
    settings = Settings.from_env(
        repo=repo or ("" if worktree or remote else None),
        worktree=worktree or ("" if repo or remote else None),
        remote=remote or ("" if repo or worktree else None),
        root=root,
        channels_file=args.channels_file,
        data_dir=data_dir,
        **extra,
    )
    if not release and settings.worktree:
        from registry.authoring.agentsroot import find_agents_root

        # Says so the way lint does, rather than "agent does not exist".
        find_agents_root(Path(settings.worktree), settings.root)
    return settings


@contextmanager
def _temporary_directory(prefix: str) -> Iterator[str]:
    """A temporary directory, removed when the command ends."""
    directory = tempfile.mkdtemp(prefix=prefix)
    owner = os.getpid()
    try:
        yield directory
    finally:
        # gunicorn's workers are forks of this process that unwind this block
        # too when they exit: only the process that made it removes it.
        if os.getpid() == owner:
            shutil.rmtree(directory, ignore_errors=True)


def service_opener(settings: Settings) -> Callable[[], AbstractContextManager[RegistryService]]:
    """What an author command opens the service with, once its own arguments are found good."""
    from registry.serving.wiring import open_service

    return partial(open_service, settings)


def _example_repository(stack: ExitStack) -> str:
    """The example repository, in a temporary directory removed afterwards."""
    from registry.store.example import build_example_repository

    return str(build_example_repository(Path(stack.enter_context(_temporary_directory("prompt-registry-example-")))))
