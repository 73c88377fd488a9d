"""Create the tables of tasks, steps, actions, artifacts and run journals.

Revision ID: 0001
Revises:
Create Date: 2026-05-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("input", sa.Text(), nullable=True),
        sa.Column("additional_input", sa.JSON(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("release_requested", sa.String(), nullable=False),
        sa.Column("release_tag", sa.String(), nullable=False),
        sa.Column("release_commit", sa.String(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("running_step_id", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("task_id", name="pk_tasks"),
    )
    op.create_index("ix_tasks_owner_created_at_task_id", "tasks", ["owner", "created_at", "task_id"])
    op.create_index("ix_tasks_created_at_task_id", "tasks", ["created_at", "task_id"])

    op.create_table(
        "steps",
        sa.Column("step_id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("input", sa.Text(), nullable=True),
        sa.Column("additional_input", sa.JSON(), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("additional_output", sa.JSON(), nullable=True),
        sa.Column("is_last", sa.Boolean(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.task_id"], name="fk_steps_task_id_tasks", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("step_id", name="pk_steps"),
    )
    op.create_index("ix_steps_task_id_number", "steps", ["task_id", "number"], unique=True)
    op.create_index("ix_steps_status", "steps", ["status"])

    op.create_table(
        "actions",
        sa.Column("action_id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("step_id", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("tool", sa.String(), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("thought", sa.Text(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_by_step_id", sa.String(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("edited_arguments", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.task_id"], name="fk_actions_task_id_tasks", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("action_id", name="pk_actions"),
    )
    op.create_index("ix_actions_task_id_created_at_action_id", "actions", ["task_id", "created_at", "action_id"])

    op.create_table(
        "artifacts",
        sa.Column("artifact_id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("agent_created", sa.Boolean(), nullable=False),
        sa.Column("file_name", sa.String(), nullable=False),
        sa.Column("relative_path", sa.String(), nullable=True),
        sa.Column("content_type", sa.String(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step_id", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.task_id"], name="fk_artifacts_task_id_tasks", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("artifact_id", name="pk_artifacts"),
    )
    op.create_index(
        "ix_artifacts_task_id_created_at_artifact_id", "artifacts", ["task_id", "created_at", "artifact_id"]
    )

    op.create_table(
        "artifact_data",
        sa.Column("artifact_id", sa.String(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.artifact_id"],
            name="fk_artifact_data_artifact_id_artifacts",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("artifact_id", name="pk_artifact_data"),
    )

    op.create_table(
        "journal",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.task_id"], name="fk_journal_task_id_tasks", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("task_id", "key", name="pk_journal"),
    )


def downgrade() -> None:
    for table in ("journal", "artifact_data", "artifacts", "actions", "steps", "tasks"):
        op.drop_table(table)
