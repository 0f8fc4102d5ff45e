"""The desktop's one-time login tickets and the scheduling pause (docs/desktop.md).

Revision ID: 0022_desktop
Revises: 0021_alert_groups
Create Date: 2027-03-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_desktop"
down_revision = "0021_alert_groups"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "desktop_tickets",
        sa.Column("ticket_hash", sa.String(64), primary_key=True),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("os_user", sa.String(200), nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("used_at", TS, nullable=True),
    )
    op.create_table(
        "scheduling_pause",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("paused_at", TS, nullable=False),
        sa.Column("paused_by", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scheduling_pause")
    op.drop_table("desktop_tickets")
