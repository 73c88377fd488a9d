"""A bare mirror of a remote prompt repository, kept fresh by fetching.

``GitMirror`` owns a bare repository in the data directory. It is created
empty (``git init --bare``) and filled by fetching, so the registry starts
even when the remote is unreachable: it serves what it has and keeps trying.
Each fetch takes every branch and tag (pruning deleted ones) and points
``HEAD`` at the remote's default branch, where the channels file is read.
Automatic ``git gc`` is off, so the commit a moved tag was first seen at is
never pruned: the registry keeps serving it.

``Syncer`` fetches every ``interval`` seconds and whenever asked (a webhook),
in a background thread. Requests never wait for a fetch: git adds objects
before it moves refs, and a request resolves its release once and then reads
by commit id, so nothing is torn. Triggers that arrive during a fetch
coalesce into one more fetch. Across worker processes an exclusive ``flock``
lets one fetch run at a time, and the outcome is written to
``sync-status.json`` so that every worker's ``/readyz`` reports the same.

Credentials in the remote URL never leave this module: every URL and git
message is passed through ``redact`` first.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from registry.errors import StoreError

log = logging.getLogger(__name__)

_GIT_ENVIRONMENT = {
    "GIT_TERMINAL_PROMPT": "0",  # fail, never wait for a password
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
}


def redact(url: str) -> str:
    """``url`` without its password or token (``https://***@host/...``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<remote>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


class SyncError(Exception):
    """A fetch failed; the message is already redacted."""


@dataclass(frozen=True)
class SyncStatus:
    """The outcome of the latest fetches, as every worker sees it."""

    remote: str
    last_success: float | None = None
    last_attempt: float | None = None
    last_error: str | None = None

    @property
    def synced(self) -> bool:
        return self.last_success is not None


class GitMirror:
    """A bare mirror of ``url`` in ``directory``."""

    def __init__(self, url: str, directory: str | os.PathLike[str], *, timeout: float = 60.0) -> None:
        self.url = url
        self.display_url = redact(url)
        self.directory = Path(directory)
        self.timeout = timeout
        self._secrets = [s for s in (url, urlsplit(url).password, urlsplit(url).username) if s]

    def ensure(self) -> None:
        """Create the empty mirror if it does not exist yet."""
        if (self.directory / "HEAD").exists():
            self._git("config", "remote.origin.url", self.url)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._git("init", "--quiet", "--bare", ".")
        self._git("config", "remote.origin.url", self.url)
        self._git("config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
        self._git("config", "--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*")
        self._git("config", "gc.auto", "0")

    def fetch(self) -> None:
        """Fetch every branch and tag, prune deleted ones, follow the default branch."""
        self._git("fetch", "--quiet", "--prune", "--no-auto-gc", "origin")
        head = self._git("ls-remote", "--symref", "origin", "HEAD")
        match = re.search(r"^ref: (refs/heads/\S+)\s+HEAD$", head, re.MULTILINE)
        if match:
            self._git("symbolic-ref", "HEAD", match.group(1))

    def _git(self, *args: str) -> str:
        try:
            result = subprocess.run(
                ["git", *args],
                cwd=self.directory,
                env={**os.environ, **_GIT_ENVIRONMENT},
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SyncError(f"git {args[0]} from {self.display_url} timed out after {self.timeout:g} s") from exc
        except OSError as exc:
            raise SyncError(f"cannot run git: {exc.strerror}") from exc
        if result.returncode != 0:
            message = self._redacted(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed")
            raise SyncError(f"git {args[0]} from {self.display_url} failed: {message}")
        return result.stdout

    def _redacted(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, self.display_url if secret == self.url else "***")
        return text


class Syncer:
    """Keeps a mirror fresh: on an interval, on request, one fetch at a time."""

    def __init__(self, mirror: GitMirror, *, interval: float, data_dir: str | os.PathLike[str]) -> None:
        self.mirror = mirror
        self.interval = interval
        self._data_dir = Path(data_dir)
        self._status_path = self._data_dir / "sync-status.json"
        self._lock_path = self._data_dir / "sync.lock"
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.fetches = 0
        """Fetches this process ran (for tests and metrics)."""
        # Fetches are numbered as they start, so that a caller can wait for
        # one that started after it asked (a fetch already under way may
        # have missed what it was asked for).
        self._progress = threading.Condition()
        self._started = 0
        self._completed = 0
        self.on_fetched: Callable[[bool], None] | None = None
        """Called after every fetch attempt with its outcome (the service listens)."""

    def start(self) -> None:
        """Start fetching in the background: now, then every ``interval`` seconds."""
        self._thread = threading.Thread(target=self._run, name="prompt-registry-sync", daemon=True)
        self._thread.start()

    def trigger(self) -> int:
        """Ask for a fetch soon; many triggers during one fetch make one more fetch.

        Returns the number of the fetch that will answer it, for ``wait_for``.
        """
        with self._progress:
            self._wake.set()
            return self._started + 1

    def wait_for(self, fetch: int, timeout: float) -> bool:
        """Wait until fetch number ``fetch`` has finished (either way); False on timeout."""
        with self._progress:
            return self._progress.wait_for(lambda: self._completed >= fetch, timeout)

    @property
    def completed(self) -> int:
        """The number of the latest fetch that has finished."""
        return self._completed

    def stop(self) -> None:
        """Stop the background thread (waits for a running fetch)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.mirror.timeout + 5)

    def status(self) -> SyncStatus:
        """The latest outcome, from any worker process."""
        try:
            data = json.loads(self._status_path.read_text(encoding="utf-8"))
            return SyncStatus(**{k: data.get(k) for k in ("remote", "last_success", "last_attempt", "last_error")})
        except (FileNotFoundError, ValueError, TypeError):
            return SyncStatus(remote=self.mirror.display_url)

    def sync_now(self) -> bool:
        """Fetch once, waiting for any other process's fetch first; True on success."""
        with self._progress:
            self._started += 1
            number = self._started
        succeeded = False
        try:
            with open(self._lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                succeeded = self._fetch_locked()
        except OSError as exc:
            log.error("cannot lock %s: %s", self._lock_path, exc)
        finally:
            with self._progress:
                self._completed = max(self._completed, number)
                self._progress.notify_all()
        if self.on_fetched is not None:
            self.on_fetched(succeeded)
        return succeeded

    def _fetch_locked(self) -> bool:
        previous = self.status()
        attempt = time.time()
        try:
            self.mirror.ensure()
            self.mirror.fetch()
        except (SyncError, StoreError) as exc:
            if previous.last_error != str(exc):
                log.warning("sync failed (serving what is already fetched): %s", exc)
            self._write_status(
                replace(previous, remote=self.mirror.display_url, last_attempt=attempt, last_error=str(exc))
            )
            return False
        finally:
            self.fetches += 1
        if previous.last_error is not None:
            log.info("sync from %s works again", self.mirror.display_url)
        self._write_status(
            replace(
                previous,
                remote=self.mirror.display_url,
                last_attempt=attempt,
                last_success=time.time(),
                last_error=None,
            )
        )
        return True

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            self.sync_now()
            self._wake.wait(self.interval)

    def _write_status(self, status: SyncStatus) -> None:
        handle, temporary = tempfile.mkstemp(dir=self._data_dir, prefix=".sync-status.", suffix=".json")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(asdict(status), out)
            os.replace(temporary, self._status_path)
        except OSError as exc:
            Path(temporary).unlink(missing_ok=True)
            log.error("cannot write %s: %s", self._status_path, exc)
