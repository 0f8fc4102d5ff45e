"""Alert groups and their one-use links (docs/notifications.md "Repeated failures").

Revision ID: 0021_alert_groups
Revises: 0020_leadership
Create Date: 2027-02-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_alert_groups"
down_revision = "0020_leadership"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "alert_groups",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("open_key", sa.String(300), nullable=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("error_class", sa.String(200), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("told", sa.Integer(), nullable=False),
        sa.Column("first_run_id", sa.String(26), nullable=True),
        sa.Column("last_run_id", sa.String(26), nullable=True),
        sa.Column("targets_json", sa.Text(), nullable=False),
        sa.Column("opened_at", TS, nullable=False),
        sa.Column("last_failure_at", TS, nullable=False),
        sa.Column("last_told_at", TS, nullable=False),
        sa.Column("snoozed_until", TS, nullable=True),
        sa.Column("snoozed_by", sa.String(200), nullable=True),
        sa.Column("acked_at", TS, nullable=True),
        sa.Column("acked_by", sa.String(200), nullable=True),
        sa.Column("closed_at", TS, nullable=True),
        sa.UniqueConstraint("open_key", name="uq_alert_groups_open_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_alert_groups_job_id_closed_at", "alert_groups",
                    ["job_id", "closed_at"])
    op.create_table(
        "alert_links",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("group_id", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("used_at", TS, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("alert_links")
    op.drop_index("ix_alert_groups_job_id_closed_at", "alert_groups")
    op.drop_table("alert_groups")
