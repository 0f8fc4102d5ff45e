"""Pool members changed in place: no index on ``resources.state`` (W4, docs/benchmarks.md).

Revision ID: 0014_resources_hot
Revises: 0013_resource_lease_step
Create Date: 2026-12-02

Every lease, start and release of a member is an UPDATE of its row that changes ``state``.
With ``state`` in an index (``ix_resources_pool_state``) none of them can be a HOT update on
PostgreSQL: each writes a new row version elsewhere in the table and new entries in both
indexes, and the old version's line pointer stays until VACUUM. Without a VACUUM in between
(autovacuum off or behind) a pool of 4 members read 63 pages after 6,000 leases and 210 after
20,000, with every claim's snapshot and every release scanning them: W4 fell from 157 to 69
leases/s as the history grew. The index is now on ``pool`` alone (its queries filter by
pool; a pool's members fit in a few pages) and, on PostgreSQL, the table keeps half of each
page free (``fillfactor = 50``) so that a member's next version fits beside the old one:
every change is then HOT and page pruning, which needs no VACUUM, keeps the table at its
live size. SQLite rewrites rows in place and is only given the same index.
"""

from __future__ import annotations

from alembic import op

revision = "0014_resources_hot"
down_revision = "0013_resource_lease_step"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_resources_pool_state", table_name="resources")
    op.create_index("ix_resources_pool", "resources", ["pool"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE resources SET (fillfactor = 50)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE resources RESET (fillfactor)")
    op.drop_index("ix_resources_pool", table_name="resources")
    op.create_index("ix_resources_pool_state", "resources", ["pool", "state"])
