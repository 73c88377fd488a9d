"""The commit each release tag was first seen at: tags are immutable here.

git lets anyone force-move a tag. A gateway pinned to ``v1.4.2`` must keep
getting the content it was tested with, so the registry remembers the first
commit it saw for every release tag and keeps serving that one; a moved tag
is reported (``moved`` in ``GET /v1/releases``, and a warning in the log),
never followed.

``FileTagMemory`` keeps the memory in ``<data-dir>/tags.json`` so a restart
keeps it, shared safely by every worker process through an exclusive
file lock around each read-merge-write and an atomic rename.
``InMemoryTagMemory`` is the same without a data directory: the memory lasts
as long as the process.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from registry.errors import StoreError
from registry.store.filelock import exclusively

log = logging.getLogger(__name__)

_FILE = "tags.json"
_LOCK = "tags.lock"


class TagMemory(Protocol):
    """Where first-seen commits are kept."""

    def remember(self, observed: Mapping[str, str]) -> dict[str, str]:
        """Record tags not seen before; return the first-seen commit of every
        tag in ``observed`` (which differs from the observed one for a moved tag)."""


class InMemoryTagMemory:
    """First-seen commits for the life of the process."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}
        self._lock = threading.Lock()

    def remember(self, observed: Mapping[str, str]) -> dict[str, str]:
        with self._lock:
            for tag, commit in observed.items():
                self._seen.setdefault(tag, commit)
            return {tag: self._seen[tag] for tag in observed}


class FileTagMemory:
    """First-seen commits in ``<directory>/tags.json``, shared by processes."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._directory = Path(directory)
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # at startup: the path is the operator's own
            raise StoreError(f"cannot create the data directory {directory}") from exc
        self._path = self._directory / _FILE
        self._lock_path = self._directory / _LOCK
        self._thread_lock = threading.Lock()
        self._known: dict[str, str] = {}

    def remember(self, observed: Mapping[str, str]) -> dict[str, str]:
        with self._thread_lock:
            if all(tag in self._known for tag in observed):
                return {tag: self._known[tag] for tag in observed}
            try:
                with exclusively(self._lock_path):
                    stored = self._read()
                    added = {t: c for t, c in observed.items() if t not in stored}
                    if added:
                        stored.update(added)
                        self._write(stored)
            except OSError as exc:
                log.error("cannot record release tags in %s: %s", self._directory, exc)
                raise StoreError("cannot record release tags in the data directory") from exc
            self._known = stored
            return {tag: stored[tag] for tag in observed}

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError):
            data = None
        tags = data.get("tags") if isinstance(data, dict) else None
        if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
            # Refusing to serve is better than forgetting: a lost memory would
            # let a moved tag be followed. (Paths go to the log, not to clients.)
            log.error("%s is not a valid tag memory; restore it, or remove it deliberately", self._path)
            raise StoreError("the registry's tag memory is corrupt")
        return dict(tags)

    def _write(self, tags: dict[str, str]) -> None:
        handle, temporary = tempfile.mkstemp(dir=self._directory, prefix=".tags.", suffix=".json")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"version": 1, "tags": dict(sorted(tags.items()))}, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self._path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
