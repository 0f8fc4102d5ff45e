"""The claim-order index holds the queued runs only.

Revision ID: 0003_claim_order_partial
Revises: 0002_claim_order
Create Date: 2026-11-30

0002 indexed every run by ``state, priority DESC, created_at, id``; each state change of a
run then moved its entry within the index. Made partial (``WHERE state = 'QUEUED'``), a run
enters the index once and leaves it when it starts. ``state`` still leads: SQLite's planner,
without statistics, only prefers an index with an equality on its first column (the claim
writes ``state = 'QUEUED'`` as a literal, which a partial index needs to be usable).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_claim_order_partial"
down_revision = "0002_claim_order"
branch_labels = None
depends_on = None

COLUMNS: list[str | sa.TextClause] = ["state", sa.text("priority DESC"), "created_at", "id"]


def upgrade() -> None:
    op.drop_index("ix_runs_claim_order", table_name="runs")
    op.create_index(
        "ix_runs_claim_order",
        "runs",
        COLUMNS,
        sqlite_where=sa.text("state = 'QUEUED'"),
        postgresql_where=sa.text("state = 'QUEUED'"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_claim_order", table_name="runs")
    op.create_index("ix_runs_claim_order", "runs", COLUMNS)
