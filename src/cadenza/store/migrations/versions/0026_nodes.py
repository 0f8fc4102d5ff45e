"""The nodes serving a store and their workers.

Revision ID: 0026_nodes
Revises: 0025_event_type_time
Create Date: 2026-12-07

On PostgreSQL several nodes share one cluster cap (``[workers] max_concurrent_runs``). A
node claims runs ahead of its workers, and those runs count against the cap: without
knowing the other nodes, one node's runs claimed ahead could fill the cap while another
node's workers sat idle. Each node now writes ``(owner, workers, seen_at)`` every few
seconds and deletes its row when it stops; a node's share of the cap's room beyond every
node's workers follows from the rows written recently (``cadenza.store.roster``). The table
exists on SQLite too (one schema), where a single node serves the store and nothing writes
it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_nodes"
down_revision = "0025_event_type_time"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("owner", sa.String(200), primary_key=True),
        sa.Column("workers", sa.Integer(), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("nodes")
