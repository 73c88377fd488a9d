"""A real PostgreSQL server for the tests: initialised in a temporary
directory, started on a free port, stopped by PID; a fresh database per test.

The binaries are the highest version under /usr/lib/postgresql/*/bin (Debian's
layout), else those on PATH. initdb refuses to run as root, so a root session
runs them as the ``postgres`` user through runuser. Durability is off (no
fsync): the server lives for one test session.

Fixtures, for a test module to import (pytest finds fixtures in the module's
namespace)::

    from tests.support.postgres_server import postgres_server, postgres_url  # noqa: F401

- ``postgres_server`` (session): the ``PostgresServer``; skips, with the
  reason, where none can be found or started.
- ``postgres_url`` (per test): the ``postgresql+psycopg://`` URL of a new,
  empty database.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.ports import free_port

SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be run here; the message says why."""


def postgres_binaries() -> Path:
    """The directory holding initdb, pg_ctl and postgres: the highest version installed."""
    installed = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")]
    if installed:
        return max(installed, key=lambda bin_dir: _version(bin_dir.parent.name))
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb", path=str(Path(on_path).parent)):
        return Path(on_path).parent
    raise PostgresUnavailable("no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH")


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def _run_as() -> list[str]:
    """The command prefix that runs a PostgreSQL binary as a user it accepts."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root, and initdb refuses root, but there is no {SUPERUSER!r} user"
        ) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root, and initdb refuses root, but there is no runuser to switch users")
    return [runuser, "-u", SUPERUSER, "--"]


class PostgresServer:
    """One PostgreSQL server in a temporary directory of its own."""

    def __init__(self) -> None:
        self.binaries = postgres_binaries()
        self._prefix = _run_as()
        # Not under pytest's tmp_path: its parents are private to root, and the server runs as postgres.
        self.directory = Path(tempfile.mkdtemp(prefix="registry-postgres-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.port = 0
        self.pid: int | None = None

    def url(self, database: str = "postgres") -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """Initialise the data directory and start the server; stopped again if it fails."""
        try:
            if self._prefix:
                shutil.chown(self.directory, user=SUPERUSER)
            initdb = self._run(
                "initdb", "-D", str(self.data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8", "--locale=C", "--no-sync"
            )
            if initdb.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {(initdb.stderr or initdb.stdout).strip()}")
            # The port is free when probed, not when bound: another process may take it in between.
            for _attempt in range(3):
                self.port = free_port()
                if self._start_on_port():
                    return self
            raise PostgresUnavailable(f"PostgreSQL did not start: {self._log_tail()}")
        except BaseException:
            self.stop()
            raise

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        name = f"test_{uuid.uuid4().hex}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as db:
            db.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def restart(self, *, down_seconds: float = 0.0) -> None:
        """Stop the server (a fast shutdown: every client's connection is
        closed) and start it again on the same port with its databases,
        after ``down_seconds`` without a server."""
        if self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "20", "stop").returncode != 0:
            raise PostgresUnavailable(f"PostgreSQL did not stop: {self._log_tail()}")
        self.pid = None
        time.sleep(down_seconds)
        if not self._start_on_port():
            raise PostgresUnavailable(f"PostgreSQL did not start again on port {self.port}: {self._log_tail()}")

    def stop(self) -> None:
        """Stop the server (a fast shutdown, else SIGKILL to its PID) and remove its directory."""
        if self.pid is not None:
            if self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "10", "stop").returncode != 0:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.pid = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def _start_on_port(self) -> bool:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        started = self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "20", "start"
        )
        if started.returncode != 0:
            return False
        # postmaster.pid: the server's PID on its first line.
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return True

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._prefix, str(self.binaries / program), *args],
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=False,
        )

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-5:])
        except OSError:
            return "no log"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session; skips where none can be found or started."""
    try:
        server = PostgresServer().start()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new, empty database on the session's server."""
    return postgres_server.create_database()
