"""A cancel request on a run, readable by whichever process holds the run's lease.

Revision ID: 0004_cancel_request
Revises: 0003_claim_order_partial
Create Date: 2026-11-30

``cadenza runs cancel RUN`` may run in any process sharing the store. A QUEUED run is canceled
at once; for a RUNNING run the request is written here (who, when) and the lease holder sees it
at its next renewal, stops the work and ends the run CANCELED naming who asked.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_cancel_request"
down_revision = "0003_claim_order_partial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cancel_requested_by", sa.String(128), nullable=True))
        batch.add_column(
            sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("cancel_requested_at")
        batch.drop_column("cancel_requested_by")
