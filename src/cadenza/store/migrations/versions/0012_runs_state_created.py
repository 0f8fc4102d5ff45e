"""The runs history by state, newest first (the runs page).

Revision ID: 0012_runs_state_created
Revises: 0011_sessions
Create Date: 2026-12-01

A page of the history filtered by state (``state = ? ORDER BY created_at DESC, id DESC
LIMIT 51``, one query per state) read every run of that state through the ``(state,
lease_until)`` index and sorted them: 400 ms for FAILED among 1,000,000 runs on SQLite.
``(state, created_at, id)`` makes it one ordered index range.
"""

from __future__ import annotations

from alembic import op

revision = "0012_runs_state_created"
down_revision = "0011_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_state_created", "runs", ["state", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_state_created", table_name="runs")
