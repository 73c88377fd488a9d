"""Which workers are alive, and putting a dead one's segments back on the queue.

DBOS resumes a worker's unfinished workflows when that same worker starts
again, or through its hosted Conductor; workers here have an id for one
life, so without this a task taken by a worker killed mid-step would wait
forever. Each worker holds a lock while it lives, which the operating
system or the database releases when it dies, however it dies:

- SQLite (one machine): an exclusive ``flock`` on ``workers/<id>.lock``
  beside the database file;
- PostgreSQL (any number of hosts): a session advisory lock named after the
  worker, on a connection the worker keeps open (and takes again after the
  server restarts).

Every worker sweeps: it lists the segments workers have taken and not
finished (``RunEngine.pending``), tries the lock of each worker named
there, and a lock it can take belongs to a dead worker. On PostgreSQL a
worker must be seen dead twice in a row, so that one whose connection
dropped with a server restart has time to take its lock again (a thread
of its own looks every quarter of a second, however long a sweep waits). The
segments are then put back on the queue (``RunEngine.requeue``, DBOS's
public ``resume_workflow``) by one sweeper at a time, which lists them again
under a sweep lock first: a segment another worker took meanwhile is named
with that worker, and left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Protocol

import psycopg
from sqlalchemy.engine import make_url

from registry.errors import ConfigurationError
from registry.runs.engine import RunEngine

log = logging.getLogger("registry.runs")

SWEEP_SECONDS = 0.5
_SWEEP_LOCK = "prompt-registry:sweep"


class Locks(Protocol):
    confirmations: int
    """How many sweeps in a row must find a worker dead before its segments move."""

    def hold(self, worker: str) -> None: ...
    def is_dead(self, worker: str) -> bool: ...
    def sweeping(self) -> contextlib.AbstractContextManager[bool]: ...
    def close(self) -> None: ...


class FileLocks:
    """Workers of one machine sharing a SQLite file: one ``flock`` each."""

    confirmations = 1

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._held: IO[bytes] | None = None

    def hold(self, worker: str) -> None:
        handle = open(self._path(worker), "wb")  # held for the worker's life
        fcntl.flock(handle, fcntl.LOCK_EX)
        self._held = handle

    def is_dead(self, worker: str) -> bool:
        path = self._path(worker)
        try:
            handle = open(path, "rb")  # closed below
        except FileNotFoundError:
            return True  # its lock was cleaned up: it is long gone
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
            return True

    @contextlib.contextmanager
    def sweeping(self) -> Iterator[bool]:
        with open(self.directory / "sweep.lock", "wb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def forget(self, worker: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(worker).unlink()

    def close(self) -> None:
        if self._held is not None:
            path = Path(self._held.name)
            self._held.close()
            self._held = None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _path(self, worker: str) -> Path:
        if "/" in worker or worker.startswith("."):
            raise ConfigurationError(f"not a worker id: {worker!r}")
        return self.directory / f"{worker}.lock"


class AdvisoryLocks:
    """Workers sharing a PostgreSQL database: a session advisory lock each."""

    confirmations = 2

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._holder: psycopg.Connection | None = None
        self._worker = ""
        self._probe: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def hold(self, worker: str) -> None:
        self._worker = worker
        self._take()

    def keep(self) -> None:
        """Take the lock again if the connection holding it is gone (the server restarted)."""
        with self._lock:
            holder = self._holder
        try:
            if holder is not None and not holder.closed:
                holder.execute("SELECT 1")
                return
        except psycopg.Error:
            pass
        self._take()

    def is_dead(self, worker: str) -> bool:
        probe = self._probe_connection()
        taken = probe.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (_key(worker),)).fetchone()
        if taken and taken[0]:
            probe.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_key(worker),))
            return True
        return False

    @contextlib.contextmanager
    def sweeping(self) -> Iterator[bool]:
        probe = self._probe_connection()
        taken = probe.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (_SWEEP_LOCK,)).fetchone()
        if not (taken and taken[0]):
            yield False
            return
        try:
            yield True
        finally:
            probe.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (_SWEEP_LOCK,))

    def close(self) -> None:
        with self._lock:
            for connection in (self._holder, self._probe):
                if connection is not None:
                    with contextlib.suppress(psycopg.Error):
                        connection.close()
            self._holder = self._probe = None

    def _take(self) -> None:
        connection = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)
        connection.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_key(self._worker),))
        with self._lock:
            old, self._holder = self._holder, connection
        if old is not None:
            with contextlib.suppress(psycopg.Error):
                old.close()

    def _probe_connection(self) -> psycopg.Connection:
        if self._probe is None or self._probe.closed or self._probe.broken:
            self._probe = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)
        return self._probe


def _key(worker: str) -> str:
    return f"prompt-registry:worker:{worker}"


def locks_for(database_url: str) -> FileLocks | AdvisoryLocks:
    url = make_url(database_url)
    if url.drivername == "sqlite":
        return FileLocks(Path(str(url.database)).resolve().parent / "workers")
    return AdvisoryLocks(url.set(drivername="postgresql").render_as_string(hide_password=False))


class Sweeper:
    """This worker's lock, held for its life, and its sweeps for the segments of dead workers."""

    def __init__(self, engine: RunEngine, *, every: float = SWEEP_SECONDS) -> None:
        self.engine = engine
        self.every = every
        self.locks = locks_for(engine.database_url)
        self._suspects: dict[str, int] = {}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.locks.hold(self.engine.worker_id)
        loops: dict[str, Callable[[], None]] = {"prompt-registry-sweeper": self._loop}
        locks = self.locks
        if isinstance(locks, AdvisoryLocks):
            loops["prompt-registry-lock-keeper"] = lambda: self._keep(locks)
        for name, loop in loops.items():
            thread = threading.Thread(target=loop, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self.locks.close()

    def sweep(self) -> int:
        """One look for dead workers; how many segments went back on the queue."""
        me = self.engine.worker_id
        named = {worker for _, worker in self.engine.pending() if worker and worker != me}
        dead = {worker for worker in named if self.locks.is_dead(worker)}
        self._suspects = {worker: self._suspects.get(worker, 0) + 1 for worker in dead}
        confirmed = {worker for worker, seen in self._suspects.items() if seen >= self.locks.confirmations}
        if not confirmed:
            return 0
        moved = 0
        with self.locks.sweeping() as mine:
            if not mine:
                return 0
            for workflow_id, worker in self.engine.pending():
                if worker in confirmed:
                    self.engine.requeue(workflow_id)
                    moved += 1
                    log.warning("worker %s is gone: %s goes back on the queue", worker, workflow_id)
        for worker in confirmed:
            self._suspects.pop(worker, None)
            if isinstance(self.locks, FileLocks):
                self.locks.forget(worker)
        return moved

    def _loop(self) -> None:
        while not self._stopping.wait(self.every):
            try:
                self.sweep()
            except Exception as exc:  # the database is away: the next sweep tries again
                log.warning("the sweep for dead workers failed: %s", exc)

    def _keep(self, locks: AdvisoryLocks) -> None:
        """Take this worker's advisory lock again as soon as the server is
        back after a restart, in a thread of its own: a sweep can wait out
        the whole outage in DBOS's own retries, and the other workers find
        the lock free within two sweeps of the server's return."""
        lost = False
        while not self._stopping.wait(self.every / 2):
            try:
                locks.keep()
                lost = False
            except Exception as exc:  # the server is away: the next look tries again
                if not lost:
                    log.warning("this worker's lock is lost until the database is back: %s", exc)
                lost = True
