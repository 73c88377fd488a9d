"""The task store's database: its engine (SQLite tuned for several
processes, or PostgreSQL), the schema brought to the latest revision by
Alembic, and database failures told in one line.

``registry.protocol.store`` reads and writes through what ``open_engine``
gives; nothing else here knows a table.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, make_url

from registry.errors import ConfigurationError
from registry.settings import redact

MIGRATIONS = Path(__file__).with_name("migrations")
"""Alembic's script directory: ``env.py`` and ``versions/``."""

# Any constant shared by every replica; ours spells "prompreg" in ASCII.
MIGRATION_LOCK = 0x70726F6D70726567

# The execution option that makes a SQLite transaction take the write lock
# when it begins (BEGIN IMMEDIATE): a transaction that reads first and writes
# later could otherwise fail at once with "database is locked" instead of
# waiting out the busy timeout.
WRITES = "registry_writes"

SQLITE_BUSY_TIMEOUT_MS = 5000
# Alembic's ``context`` and ``op`` are module-level proxies: two upgrades at
# once in one process (two stores opened together) would share them.
UPGRADING = threading.Lock()

# The driver failed, the server is gone, or the pool has no connection left.
# Other SQLAlchemy errors (a value that cannot be bound...) are bugs, not outages.
DATABASE_FAILURES = (sa_exc.DBAPIError, sa_exc.TimeoutError)


def open_engine(url: str) -> Engine:
    """The engine of the task store at ``url``, its schema at the latest revision."""
    engine = _create_engine(url)
    try:
        _upgrade(engine, url)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _create_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise ConfigurationError(f"the task store URL is not a database URL: {redact(url)!r}") from exc
    if parsed.drivername == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ConfigurationError(f"the task store URL names no database file: {redact(url)!r}")
        engine = create_engine(parsed)
        event.listen(engine, "connect", _configure_sqlite)
        event.listen(engine, "begin", _begin_sqlite)
        return engine
    if parsed.drivername == "postgresql+psycopg":
        # pool_pre_ping: a connection the server closed (a restart, a failover)
        # is replaced instead of failing the next request.
        return create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 5})
    raise ConfigurationError(
        f"the task store URL must start with sqlite:/// or postgresql+psycopg://, not {redact(url)!r}"
    )


def _configure_sqlite(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    # The driver's own transaction handling begins transactions only before
    # writes and never before DDL; _begin_sqlite begins each one instead.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _use_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _use_wal(cursor: sqlite3.Cursor) -> None:
    """Put the database in WAL mode (readers never wait for the writer, nor
    the writer for them), which the file keeps once set."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            # SQLite answers "locked" at once here, without waiting out the busy
            # timeout, while another process opens a new file or switches it to WAL.
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _begin_sqlite(connection: Connection) -> None:
    writes = connection.get_execution_options().get(WRITES, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def _upgrade(engine: Engine, url: str) -> None:
    """Bring the schema to the latest revision, in one transaction."""
    config = Config()
    # The option goes through ConfigParser, which would read a % as interpolation.
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    try:
        with UPGRADING, engine.connect() as connection:
            # On SQLite, BEGIN IMMEDIATE makes a second process wait for the first one's upgrade.
            connection.execution_options(**{WRITES: True})
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Replicas starting together: one upgrades, the others
                    # wait here, then find the schema at the latest revision.
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
    except DATABASE_FAILURES as exc:
        raise ConfigurationError(f"cannot open the task store at {redact(url)}: {first_line(exc, engine.url)}") from exc
    except CommandError as exc:
        # A revision this version does not know: a newer one upgraded the database.
        raise ConfigurationError(f"cannot migrate the task store at {redact(url)}: {first_line(exc)}") from exc


def first_line(exc: Exception, url: URL | None = None) -> str:
    """The error in one line: the driver's own message when there is one
    (SQLAlchemy's adds the statement and its parameters, an event or an
    artifact's bytes among them), without the URL's password."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    line = lines[0] if lines else type(cause).__name__
    if url is not None and url.password:
        line = line.replace(str(url.password), "***")
    return line
