"""The notifications' outbox: message intents written with the state change that causes them.

Revision ID: 0009_outbox
Revises: 0007_runs_version
Create Date: 2026-12-01

A run end, a MISSED fire, a long run or a stalled schedule writes one row here in the same
transaction as the change itself (``event_key`` unique: writing one intent twice is a no-op),
so that a crash right after the change still sends. The sender service of a node claims due
rows (``claimed_by`` / ``claimed_until``; ``FOR UPDATE SKIP LOCKED`` on PostgreSQL), delivers
each message, and records every delivery in ``notification_log``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_outbox"
down_revision = "0007_runs_version"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "notification_outbox",
        sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("event_key", sa.String(512), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(26), nullable=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("targets_json", sa.Text(), nullable=False),
        sa.Column("context_json", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("not_before", TS, nullable=False),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("claimed_until", TS, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notification_outbox"),
        sa.UniqueConstraint("event_key", name="uq_notification_outbox_event_key"),
        sa.CheckConstraint("state IN ('PENDING', 'DONE')", name="ck_notification_outbox_state"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_notification_outbox_due", "notification_outbox",
                    ["state", "not_before"])


def downgrade() -> None:
    op.drop_index("ix_notification_outbox_due", table_name="notification_outbox")
    op.drop_table("notification_outbox")
