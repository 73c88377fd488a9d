"""Alembic's environment for the task store (``registry.protocol.store``).

Migrations run only on the connection ``TaskStore`` passes in
``config.attributes["connection"]``, inside the transaction it holds (under
PostgreSQL's advisory lock, or SQLite's write lock); never from a URL or an
alembic.ini of their own.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from registry.protocol.tables import METADATA

connection: Connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    # What autogenerate compares the database with, when writing the next revision.
    target_metadata=METADATA,
    # SQLite alters a table by copying it: Alembic's batch mode does that.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
