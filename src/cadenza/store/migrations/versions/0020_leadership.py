"""The scheduler's leadership as a lease: one row per role, its holder, its fencing token
(``epoch``) and its end judged by the database's clock (docs/scheduling.md, "Who fires").

Revision ID: 0020_leadership
Revises: 0019_run_recoveries
Create Date: 2027-01-21

Used on PostgreSQL, where several nodes share one database. A SQLite store keeps its
leadership in an OS file lock next to the database; the table stays empty there.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_leadership"
down_revision = "0019_run_recoveries"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "leadership",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("since", TS, nullable=False),
        sa.Column("until", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leadership")
