"""A run's recoveries as a column: the reaper's count of the times it took the run back.

Revision ID: 0019_run_recoveries
Revises: 0018_user_language
Create Date: 2027-01-20

Before, the reaper counted a run's RUN_RECOVERED events each time it reaped it (the audit
log read as a counter). The column is filled from those events for the runs the reaper can
still take (RUNNING, QUEUED, NEEDS_REVIEW); a finished run keeps 0, its history stays in
its events.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_run_recoveries"
down_revision = "0018_user_language"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("recoveries", sa.Integer(), nullable=False,
                                   server_default="0"))
    op.execute(
        "UPDATE runs SET recoveries = (SELECT count(*) FROM event_log"
        " WHERE event_log.run_id = runs.id AND event_log.event_type = 'RUN_RECOVERED')"
        " WHERE state IN ('RUNNING', 'QUEUED', 'NEEDS_REVIEW')")


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("recoveries")
