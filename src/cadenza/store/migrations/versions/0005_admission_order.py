"""The claim-order index follows the admission order: priority, then scheduled time.

Revision ID: 0005_admission_order
Revises: 0004_cancel_request
Create Date: 2026-11-30

Admission (docs/admission.md) takes QUEUED runs by priority, then scheduled time
(``coalesce(scheduled_for, created_at)``), then id; 0003's index was ordered by
``created_at``, so every decision read all the queued runs of the top priority and sorted
them (SQLite: "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY"): 5–9 ms per decision with 3,000
queued runs, 60 ms with 100,000. Indexed on the expression itself, a decision reads its
candidates in index order and stops at its limit. The ordinary claim orders by the same key.

SQLAlchemy does not reflect SQLite's expression indexes: a later migration that rebuilds
``runs`` with ``batch_alter_table`` on SQLite would drop this index silently. Such a
migration must create it again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_admission_order"
down_revision = "0004_cancel_request"
branch_labels = None
depends_on = None

QUEUED_ONLY = sa.text("state = 'QUEUED'")


def upgrade() -> None:
    op.drop_index("ix_runs_claim_order", table_name="runs")
    op.create_index(
        "ix_runs_claim_order",
        "runs",
        ["state", sa.text("priority DESC"), sa.text("coalesce(scheduled_for, created_at)"),
         "id"],
        sqlite_where=QUEUED_ONLY,
        postgresql_where=QUEUED_ONLY,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_claim_order", table_name="runs")
    op.create_index("ix_runs_claim_order", "runs",
                    ["state", sa.text("priority DESC"), "created_at", "id"],
                    sqlite_where=QUEUED_ONLY, postgresql_where=QUEUED_ONLY)
