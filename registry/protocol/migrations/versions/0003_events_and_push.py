"""Each task's event log, push notification configurations, a task's mode and a step's worker.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_events",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name="fk_task_events_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", "seq", name="pk_task_events"),
    )
    op.create_table(
        "push_configs",
        sa.Column("config_id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("token", sa.Text(), nullable=True),
        sa.Column("authentication", sa.JSON(), nullable=True),
        sa.Column("secret", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name="fk_push_configs_task_id_tasks", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("config_id", "task_id", name="pk_push_configs"),
    )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("mode", sa.String(), server_default="stepped", nullable=False))
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("worker", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("worker")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("mode")
    op.drop_table("push_configs")
    op.drop_table("task_events")
