"""Login throttling and the API's idempotency keys (the REST API).

Revision ID: 0011_sessions
Revises: 0010_call_job
Create Date: 2026-12-01

``sessions`` and ``api_tokens`` exist since 0001; this adds ``login_failures`` (failed
logins by user and address, what throttling counts) and ``idempotency_keys`` (one row per
caller and ``Idempotency-Key``, inserted before the run: concurrent requests with one key,
on any node, agree on one run).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_sessions"
down_revision = "0010_call_job"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "login_failures",
        sa.Column("id", BIG_ID, autoincrement=True),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("failed_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_login_failures"),
    )
    op.create_index("ix_login_failures_username_failed_at", "login_failures",
                    ["username", "failed_at"])
    op.create_index("ix_login_failures_address_failed_at", "login_failures",
                    ["address", "failed_at"])
    op.create_table(
        "idempotency_keys",
        sa.Column("principal", sa.String(140), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("body_hash", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(26), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("principal", "key", name="pk_idempotency_keys"),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_index("ix_login_failures_address_failed_at", table_name="login_failures")
    op.drop_index("ix_login_failures_username_failed_at", table_name="login_failures")
    op.drop_table("login_failures")
