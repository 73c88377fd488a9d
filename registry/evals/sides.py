"""One side of an evaluation: a release, or the working tree, resolved once
and pinned; its agents as the executor runs them; and its eval files.

A side is opened from a ref: ``worktree`` reads the library's files on disk,
uncommitted changes included (its "commit" is a digest of its files, as
``registry.store.worktree`` serves them); anything else is resolved once by
the service, as ``?release=`` is (a version, a range, ``@channel``,
``latest``), and every agent, judge and eval file of the side is then read
from that one commit, however the ref moves meanwhile.

Eval files are read from the same tree as the agents: for a release, from
the commit's evals root in git, streamed by ``git cat-file`` so that a
dataset of 100,000 cases is never held whole; for the working tree, from
disk. Each file has its git blob id (the working tree's is the id git would
give it), which tells whether a dataset changed between the sides.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from registry.client import Agent
from registry.errors import (
    AgentNotFound,
    ConfigurationError,
    InvalidDefinition,
    InvalidRequest,
    ReleaseNotFound,
    summarize,
)
from registry.evals.dataset import EvalHeader, agent_of_path, evals_root
from registry.evals.reading import EvalFile, EvalLimits
from registry.evals.results import ReleasePin, SideName
from registry.evals.runnable import agent_at
from registry.format.loading import ReleaseCatalog
from registry.format.safeyaml import YamlLimits
from registry.models import WORKTREE_TAG, Release, Resolution
from registry.store.git import GitStore, GitTree
from registry.store.protocol import Store
from registry.store.worktree import open_worktree_catalog

WORKTREE = WORKTREE_TAG
"""The ref of the working tree, uncommitted changes included."""
_CHUNK = 1 << 20


class Releases(Protocol):
    """What a side's ref is resolved through: the registry's service
    (``registry.serving.service.RegistryService``), named by what it does so
    that this package sits below the HTTP layer (whose UI lists eval cases)."""

    @property
    def store(self) -> Store: ...

    def resolve(self, release: str | None) -> Resolution: ...

    def catalog(self, release: Release) -> ReleaseCatalog: ...


class Datasets(Protocol):
    """The eval files of one side."""

    def files(self) -> Mapping[str, str]:
        """Each eval file (``<usecase>/<name>.yml`` under the evals root, not
        under a folder starting with ``_``), by path relative to the evals
        root, with its git blob id; in path order."""
        ...

    def open(self, relative: str) -> AbstractContextManager[IO[bytes]]:
        """The file at ``relative`` as a stream."""
        ...


class GitDatasets:
    """Eval files of a commit, read from the repository's objects."""

    def __init__(self, tree: GitTree) -> None:
        self._tree = tree

    def files(self) -> Mapping[str, str]:
        return {path: self._tree.object_id(path) for path in sorted(self._tree.paths()) if _is_eval_file(path)}

    def open(self, relative: str) -> AbstractContextManager[IO[bytes]]:
        return self._tree.open(relative)


class DiskDatasets:
    """Eval files of the working tree, read from disk."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def files(self) -> Mapping[str, str]:
        found: list[str] = []
        for folder, subfolders, names in os.walk(self._directory):
            subfolders[:] = [name for name in subfolders if not name.startswith(("_", "."))]
            relative = Path(folder).relative_to(self._directory)
            found.extend(path for name in names if _is_eval_file(path := (relative / name).as_posix()))
        return {path: _blob_id(self._directory / path) for path in sorted(found)}

    def open(self, relative: str) -> AbstractContextManager[IO[bytes]]:
        return _opened(self._directory / relative)


@contextmanager
def _opened(path: Path) -> Iterator[IO[bytes]]:
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with stream:
        yield stream


def _is_eval_file(relative: str) -> bool:
    return agent_of_path(relative) is not None and not relative.startswith(("_", "."))


def _blob_id(path: Path) -> str:
    """The id git gives the file's content as a blob, read in pieces."""
    digest = hashlib.sha1(usedforsecurity=False)
    try:
        digest.update(b"blob %d\0" % path.stat().st_size)
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return digest.hexdigest()


@dataclass
class Side:
    """A side pinned to one commit: its agents and its eval files."""

    name: SideName
    resolution: Resolution
    catalog: ReleaseCatalog
    datasets: Datasets
    evals_root: str
    """The evals root, relative to the repository (``ai_gateway/evals``)."""
    _agents: dict[str, Agent | str] = field(default_factory=dict, repr=False)
    _files: Mapping[str, str] | None = field(default=None, repr=False)

    @property
    def tag(self) -> str:
        return self.resolution.release.tag

    @property
    def pin(self) -> ReleasePin:
        release = self.resolution
        return ReleasePin(self.name, release.requested, release.release.tag, release.release.commit, release.channel)

    @property
    def where(self) -> str:
        """``at v1.1.0``, or ``in the working tree``, for messages."""
        return "in the working tree" if self.tag == WORKTREE else f"at {self.tag}"

    def files(self) -> Mapping[str, str]:
        """The side's eval files with their blob ids (``Datasets.files``), listed once."""
        if self._files is None:
            self._files = self.datasets.files()
        return self._files

    def eval_file(self, relative: str) -> str:
        """An eval file's path relative to the repository."""
        return f"{self.evals_root}/{relative}" if self.evals_root else relative

    def agent(self, reference: str) -> Agent | str:
        """The agent ``usecase/name`` as the executor runs it, or why it cannot run (one line)."""
        found = self._agents.get(reference)
        if found is None:
            found = self._agents[reference] = self._load(reference)
        return found

    def digest(self, reference: str) -> str | None:
        """The agent's digest; None when it is missing or invalid on this side."""
        found = self.agent(reference)
        return found.digest if isinstance(found, Agent) else None

    def header(self, relative: str, *, limits: EvalLimits = EvalLimits()) -> EvalHeader:
        """What the eval file at ``relative`` says before its cases."""
        with self.open_dataset(relative, limits=limits) as dataset:
            return dataset.header

    @contextmanager
    def open_dataset(self, relative: str, *, limits: EvalLimits = EvalLimits()) -> Iterator[EvalFile]:
        """The eval file at ``relative``, open for reading its cases once."""
        with self.datasets.open(relative) as stream:
            yield EvalFile(stream, source=self.eval_file(relative), agent=agent_of_path(relative), limits=limits)

    def _load(self, reference: str) -> Agent | str:
        usecase, _, name = reference.partition("/")
        try:
            loaded = self.catalog.load(usecase, name)
        except AgentNotFound:
            return f"{reference} does not exist {self.where}"
        if isinstance(loaded, InvalidDefinition):
            return f"{reference} is not a valid definition {self.where}: {summarize(loaded.errors)}"
        return agent_at(self.catalog, self.resolution, loaded)


def open_side(name: SideName, ref: str, service: Releases, *, directory: Path | None) -> Side:
    """The side ``ref`` names, resolved now: ``worktree`` (the files of the
    library at ``directory``) or a release of ``service``. Raises
    ``ConfigurationError`` naming the option when it names nothing."""
    agents_root = service.store.root
    root = evals_root(agents_root)
    if ref == WORKTREE:
        if directory is None:
            raise ConfigurationError(f"--{name} worktree: this library has no working tree (a remote's mirror)")
        catalog = open_worktree_catalog(directory, agents_root, YamlLimits())
        release = Release(tag=WORKTREE, version=None, commit=catalog.commit)
        resolution = Resolution(requested=WORKTREE, release=release)
        return Side(name, resolution, catalog, DiskDatasets(directory / root), root)
    try:
        resolution = service.resolve(ref)
    except (InvalidRequest, ReleaseNotFound) as exc:
        raise ConfigurationError(f"--{name} {ref}: {exc.detail}") from exc
    catalog = service.catalog(resolution.release)
    store = service.store
    datasets: Datasets
    if isinstance(store, GitStore):
        datasets = GitDatasets(store.tree(resolution.release, root=root))
    elif directory is not None:  # a plain directory served as its one release
        datasets = DiskDatasets(directory / root)
    else:
        raise ConfigurationError(f"--{name} {ref}: this library's eval files cannot be read")
    return Side(name, resolution, catalog, datasets, root)
