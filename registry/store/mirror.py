"""A bare mirror of a remote prompt repository, kept fresh by fetching.

``GitMirror`` owns a bare repository in the data directory. It is created
empty (``git init --bare``) and filled by fetching, so the registry starts
even when the remote is unreachable: it serves what it has and keeps trying.
Each fetch takes every branch and tag (pruning deleted ones) and points
``HEAD`` at the remote's default branch, where the channels file is read.
Automatic ``git gc`` is off, so the commit a moved tag was first seen at is
never pruned: the registry keeps serving it.

A fetch moves its refs in one transaction (``--atomic``): a fetch that fails
or is killed moves all of them or none, so a replica never serves v1.69.0
without v1.68.0. A git that runs past its time limit is asked to stop
(``SIGTERM``, on which git removes its lock files) before it is killed. A git
killed outright (by the OOM killer, or with the worker that ran it) leaves
its lock files behind, and every later fetch would fail on them; so before
each fetch the mirror clears lock files that are older than
``stale_lock_seconds`` while no git process is working in the mirror.

``Syncer`` fetches every ``interval`` seconds and whenever asked (a webhook),
in a background thread. Requests never wait for a fetch: git adds objects
before it moves refs, and a request resolves its release once and then reads
by commit id, so nothing is torn. Triggers that arrive during a fetch
coalesce into one more fetch. Across worker processes an exclusive file lock
(``registry.store.filelock``, whose wait lets a gevent worker go on serving)
lets one fetch run at a time; a worker whose turn comes after another's
fetch that started after it was asked skips its own. The outcome is written
to ``sync-status.json`` so that every worker's ``/readyz`` reports the same.

Credentials in the remote URL never leave this module: every URL and git
message is passed through ``redact`` first.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from registry.errors import StoreError
from registry.models import plural
from registry.settings import redact
from registry.store.filelock import exclusively

log = logging.getLogger(__name__)

_GIT_ENVIRONMENT = {
    "GIT_TERMINAL_PROMPT": "0",  # fail, never wait for a password
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
}
# A git asked to stop cleans up its lock files; one that has not exited by
# then is killed.
_STOP_GRACE_SECONDS = 2.0
# The lock files a git writing to a bare repository may leave, besides the
# ref locks under refs/.
_TOP_LEVEL_LOCKS = ("HEAD.lock", "packed-refs.lock", "index.lock", "config.lock", "shallow.lock", "FETCH_HEAD.lock")
# Readiness states (``SyncStatus.state``).
READY, NOT_SYNCED, SYNC_FAILING = "ready", "not-synced", "sync-failing"
READINESS_STATES = (READY, NOT_SYNCED, SYNC_FAILING)


class SyncError(Exception):
    """A fetch failed; the message is already redacted."""


@dataclass(frozen=True)
class SyncStatus:
    """The outcome of the latest fetches, as every worker sees it."""

    remote: str
    last_success: float | None = None
    last_attempt: float | None = None
    last_error: str | None = None
    failing_since: float | None = None
    """When the fetches started failing (the first failure since the last success)."""
    stale_locks_cleared: int = 0
    """Lock files left by killed git processes and cleared, in all."""
    fetches_started: int = 0
    """Fetches begun by any worker, numbered as they begin (under the sync lock)."""
    last_success_fetch: int = 0
    """The number of the latest fetch that succeeded."""
    failing_limit: float = field(default=0.0, compare=False)
    """How long fetches may fail before the replica is not ready (0: forever);
    the ``Syncer``'s setting, not stored."""

    @property
    def synced(self) -> bool:
        return self.last_success is not None

    def failing_for(self, now: float) -> float:
        """Seconds the fetches have been failing, without a success since (0: they are not)."""
        if self.last_error is None:
            return 0.0
        since = self.failing_since if self.failing_since is not None else self.last_attempt
        return max(0.0, now - since) if since is not None else 0.0

    def state(self, now: float) -> str:
        """``ready``; ``not-synced`` before the first success; ``sync-failing``
        once the fetches have failed for longer than ``failing_limit``."""
        if not self.synced:
            return NOT_SYNCED
        if self.failing_limit > 0 and self.failing_for(now) > self.failing_limit:
            return SYNC_FAILING
        return READY


_STORED_FIELDS = (
    "remote",
    "last_success",
    "last_attempt",
    "last_error",
    "failing_since",
    "stale_locks_cleared",
    "fetches_started",
    "last_success_fetch",
)


class GitMirror:
    """A bare mirror of ``url`` in ``directory``."""

    def __init__(
        self,
        url: str,
        directory: str | os.PathLike[str],
        *,
        timeout: float = 60.0,
        stale_lock_seconds: float = 30.0,
    ) -> None:
        self.url = url
        self.display_url = redact(url)
        self.directory = Path(directory)
        self.timeout = timeout
        self.stale_lock_seconds = stale_lock_seconds
        """Lock files older than this, with no git working here, were left by a killed git."""
        self._secrets = [s for s in (url, urlsplit(url).password, urlsplit(url).username) if s]

    def ensure(self) -> None:
        """Create the empty mirror if it does not exist yet.

        Every worker of a replica calls it as it boots: a lock next to the
        mirror makes one of them create it, and the others find it made (two
        ``git init`` in one directory fail, and so does the worker that loses).
        """
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            with exclusively(self.directory.with_name(self.directory.name + ".lock")):
                self._ensure_locked()
        except OSError as exc:
            raise SyncError(f"cannot lock the mirror {self.directory} to create it: {exc}") from exc

    def _ensure_locked(self) -> None:
        if (self.directory / "HEAD").exists():
            # Written only when it changed: writing takes a lock every worker would contend for.
            if self._git("config", "--default", "", "--get", "remote.origin.url").strip() != self.url:
                self._git("config", "remote.origin.url", self.url)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._git("init", "--quiet", "--bare", ".")
        self._git("config", "remote.origin.url", self.url)
        self._git("config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
        self._git("config", "--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*")
        self._git("config", "gc.auto", "0")

    def fetch(self) -> None:
        """Fetch every branch and tag, prune deleted ones, follow the default branch.

        The refs move in one transaction: all of them, or none if the fetch fails.
        """
        self._git("fetch", "--quiet", "--atomic", "--prune", "--no-auto-gc", "origin")
        head = self._git("ls-remote", "--symref", "origin", "HEAD")
        match = re.search(r"^ref: (refs/heads/\S+)\s+HEAD$", head, re.MULTILINE)
        if match:
            self._git("symbolic-ref", "HEAD", match.group(1))

    def clear_stale_locks(self) -> list[str]:
        """Remove the lock files a killed git left behind; the paths removed.

        A lock is stale when it is older than ``stale_lock_seconds`` and no git
        process is working in the mirror (git holds a ref lock for
        milliseconds). The caller holds the sync lock, so no fetch of this
        replica can start meanwhile. Where running processes cannot be seen
        (no ``/proc``), nothing is removed: the locks are logged instead.
        """
        locks = self._lock_files()
        if not locks:
            return []
        now = time.time()
        stale: list[tuple[Path, float]] = []
        fresh: list[tuple[Path, float]] = []
        for path in locks:
            try:
                age = now - path.stat().st_mtime
            except FileNotFoundError:
                continue  # its git finished meanwhile
            (stale if age > self.stale_lock_seconds else fresh).append((path, age))
        if fresh:
            log.info(
                "left %s alone: younger than %g s, a git may still be writing it",
                _described(self.directory, fresh),
                self.stale_lock_seconds,
            )
        if not stale:
            return []
        running = self._git_processes()
        if running is None or running:
            log.warning(
                "not clearing %s: %s",
                _described(self.directory, stale),
                "cannot tell whether a git is running here (no /proc); remove them by hand if none is"
                if running is None
                else f"git is running in the mirror (pid {', '.join(map(str, running))})",
            )
            return []
        cleared = []
        for path, age in stale:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.error("cannot remove stale lock %s: %s", path, exc.strerror)
                continue
            cleared.append((path, age))
        if cleared:
            log.warning(
                "cleared %s left by a git process that did not finish (no git is running in the mirror)",
                _described(self.directory, cleared),
            )
        return [path.relative_to(self.directory).as_posix() for path, _ in cleared]

    def _lock_files(self) -> list[Path]:
        top = [self.directory / name for name in _TOP_LEVEL_LOCKS]
        return [path for path in top if path.exists()] + sorted((self.directory / "refs").rglob("*.lock"))

    def _git_processes(self) -> list[int] | None:
        """The git processes of this user working in the mirror, besides the
        store's object readers (``git cat-file``, which take no locks); None
        where processes cannot be listed."""
        proc = Path("/proc")
        if not (proc / "self" / "cwd").exists():
            return None
        here = self.directory.resolve()
        found = []
        with os.scandir(proc) as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                try:
                    if Path(os.readlink(f"{entry.path}/cwd")) != here:
                        continue
                    argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue  # gone, or another user's
                if Path(os.fsdecode(argv[0])).name.startswith("git") and argv[1:2] != [b"cat-file"]:
                    found.append(int(entry.name))
        return found

    def _git(self, *args: str) -> str:
        try:
            # A session of its own: a git past its time limit is stopped
            # together with the helpers it started (remote helpers, index-pack).
            process = subprocess.Popen(
                ["git", *args],
                cwd=self.directory,
                env={**os.environ, **_GIT_ENVIRONMENT},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise SyncError(f"cannot run git: {exc.strerror}") from exc
        try:
            stdout, stderr = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired as exc:
            _stop(process)
            raise SyncError(f"git {args[0]} from {self.display_url} timed out after {self.timeout:g} s") from exc
        if process.returncode != 0:
            raise SyncError(f"git {args[0]} from {self.display_url} failed: {self._reason(process.returncode, stderr)}")
        return stdout

    def _reason(self, returncode: int, stderr: str) -> str:
        """Why git failed, in one line: its last error rather than the advice after it."""
        lines = stderr.strip().splitlines()
        errors = [line for line in lines if line.startswith(("fatal:", "error:"))]
        if errors or lines:
            # Paths inside the mirror are told relative to it: answers carry no server paths.
            return self._redacted((errors or lines)[-1]).replace(f"{self.directory.resolve()}/", "")
        return f"killed by signal {-returncode}" if returncode < 0 else "failed"

    def _redacted(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, self.display_url if secret == self.url else "***")
        return text


def _stop(process: subprocess.Popen[str]) -> None:
    """Stop a git and the helpers it started: asked first, so that git removes
    its lock files, then whatever is left is killed."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.communicate(timeout=_STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process, signal.SIGKILL)
    process.communicate()


def _signal_group(process: subprocess.Popen[str], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass  # every process of the group has exited


def _described(directory: Path, locks: list[tuple[Path, float]]) -> str:
    names = ", ".join(f"{path.relative_to(directory).as_posix()} ({age:.0f} s old)" for path, age in locks)
    return f"{plural(len(locks), 'git lock file')} in {directory}: {names}"


class Syncer:
    """Keeps a mirror fresh: on an interval, on request, one fetch at a time."""

    def __init__(
        self,
        mirror: GitMirror,
        *,
        interval: float,
        data_dir: str | os.PathLike[str],
        failing_limit: float = 600.0,
    ) -> None:
        self.mirror = mirror
        self.interval = interval
        self.failing_limit = failing_limit
        """Seconds fetches may keep failing before the replica is not ready (0: forever)."""
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
            stored = {k: data[k] for k in _STORED_FIELDS if k in data}
            return SyncStatus(**stored, failing_limit=self.failing_limit)
        except (FileNotFoundError, ValueError, TypeError):
            return SyncStatus(remote=self.mirror.display_url, failing_limit=self.failing_limit)

    def sync_now(self) -> bool:
        """Fetch once, waiting for any other process's fetch first; True on success."""
        # Any fetch numbered after this began after it was asked for: one
        # under way now has its number already.
        begun = self.status().fetches_started
        with self._progress:
            self._started += 1
            number = self._started
        succeeded = False
        try:
            with exclusively(self._lock_path):
                succeeded = self._fetch_locked(begun)
        except OSError as exc:
            log.error("cannot lock %s: %s", self._lock_path, exc)
        finally:
            with self._progress:
                self._completed = max(self._completed, number)
                self._progress.notify_all()
        if self.on_fetched is not None:
            self.on_fetched(succeeded)
        return succeeded

    def _fetch_locked(self, begun: int) -> bool:
        """Fetch, unless a fetch that began after ``begun`` fetches had begun
        succeeded (numbers, not clocks: a clock stepped back must not skip a
        fetch)."""
        previous = self.status()
        if previous.last_error is None and previous.last_success_fetch > begun:
            # Another worker's fetch began after this one was asked for, and
            # succeeded: it brought everything this one would (every worker of
            # a replica hears the same announcement, and fetched in turn).
            return True
        fetch = previous.fetches_started + 1
        previous = replace(previous, fetches_started=fetch)
        self._write_status(previous)
        attempt = time.time()
        cleared: list[str] = []
        try:
            cleared = self.mirror.clear_stale_locks()
            self.mirror.ensure()
            self.mirror.fetch()
        except (SyncError, StoreError) as exc:
            if previous.last_error != str(exc):
                log.warning("sync failed (serving what is already fetched): %s", exc)
            failing_since = previous.failing_since if previous.last_error is not None else None
            self._write_status(
                replace(
                    previous,
                    remote=self.mirror.display_url,
                    last_attempt=attempt,
                    last_error=str(exc),
                    failing_since=attempt if failing_since is None else failing_since,
                    stale_locks_cleared=previous.stale_locks_cleared + len(cleared),
                )
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
                last_success_fetch=fetch,
                last_error=None,
                failing_since=None,
                stale_locks_cleared=previous.stale_locks_cleared + len(cleared),
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
                json.dump({k: v for k, v in asdict(status).items() if k in _STORED_FIELDS}, out)
            os.replace(temporary, self._status_path)
        except OSError as exc:
            Path(temporary).unlink(missing_ok=True)
            log.error("cannot write %s: %s", self._status_path, exc)
