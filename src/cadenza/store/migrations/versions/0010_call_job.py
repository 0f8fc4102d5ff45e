"""A run's parent: the run and step of a ``call_job`` that created it.

Revision ID: 0010_call_job
Revises: 0009_outbox
Create Date: 2026-12-01

A ``call_job`` step creates its child run once per parent run and step: the unique index on
(``parent_run_id``, ``parent_step``) is that operation key, written in the same transaction
as the child (a resumed parent finds its child instead of starting a second one; two
attempts racing cannot both insert). The same index finds a run's children (cancel them
with their parent, ``runs show``); both columns are NULL for every other run, and NULLs
never collide on either dialect.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_call_job"
down_revision = "0009_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch): rebuilding ``runs`` on SQLite would drop 0005's
    # expression index and 0007's triggers.
    op.add_column("runs", sa.Column("parent_run_id", sa.String(26), nullable=True))
    op.add_column("runs", sa.Column("parent_step", sa.String(128), nullable=True))
    op.create_index("ix_runs_parent", "runs", ["parent_run_id", "parent_step"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_runs_parent", table_name="runs")
    op.drop_column("runs", "parent_step")
    op.drop_column("runs", "parent_run_id")
