"""An index in the order runs are claimed: state, priority (highest first), age.

Revision ID: 0002_claim_order
Revises: 0001
Create Date: 2026-11-30

``claim_runs`` reads the first QUEUED runs by ``priority DESC, created_at, id``. Without an
index in exactly that order the database sorts every queued run on each claim, which makes
draining a backlog of N runs cost O(N² log N); with it, a claim reads the first rows only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_claim_order"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_claim_order",
        "runs",
        ["state", sa.text("priority DESC"), "created_at", "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_runs_claim_order", table_name="runs")
