"""Runs on DBOS: no more runners, heartbeats or claims; segments and delivered steps.

A step the old engine left running (its process is gone: the old service
failed such steps at its next start) is failed now, and its task waits for
the next step, as the old service would have done.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# A mapping: the JSON type writes it as the object (a str would be stored as a JSON string).
_INTERRUPTED = {"state": "failed", "error": "the service was upgraded while this step ran: post a new step to go on"}


def upgrade() -> None:
    op.execute("UPDATE tasks SET status = 'waiting_for_input', running_step_id = NULL WHERE status = 'running'")
    op.execute(
        sa.text("UPDATE steps SET status = 'failed', additional_output = :reason WHERE status = 'running'").bindparams(
            sa.bindparam("reason", value=_INTERRUPTED, type_=sa.JSON())
        )
    )
    with op.batch_alter_table("steps") as batch:
        batch.drop_index("ix_steps_status")
        batch.drop_column("runner_id")
    op.drop_table("runners")
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("segments", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("delivered", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("delivered")
        batch.drop_column("segments")
    op.create_table(
        "runners",
        sa.Column("runner_id", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("runner_id", name="pk_runners"),
    )
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("runner_id", sa.String(), nullable=True))
        batch.create_index("ix_steps_status", ["status"])
