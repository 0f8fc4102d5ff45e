"""The runs' version counter: what a staged claim checks to know that nothing changed.

Revision ID: 0007_runs_version
Revises: 0006_budget_starts
Create Date: 2026-12-01

A staged burst claims its runs in chunks, each its own transaction, on a decision made before
the first one (store/claims.py). Between two chunks of one node, another writer may have
queued, canceled, claimed, ended or re-queued a run. On SQLite a one-row counter,
``runs_version``, is bumped by triggers in the transaction of every such write: an unchanged
value means the decision still holds. Triggers, so that no write path can forget it; on the
columns an admission decision reads only (state, not_before, priority, lease_epoch, job_id),
so that lease renewals, wait reasons and parameters do not bump it.

PostgreSQL gets the table (one schema for both) but no triggers: a counter row would
serialize every writer of ``runs`` across nodes, and there each chunk checks everything.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_runs_version"
down_revision = "0006_budget_starts"
branch_labels = None
depends_on = None

_BUMP = "BEGIN UPDATE runs_version SET version = version + 1 WHERE id = 1; END"
TRIGGERS = {
    "runs_version_insert": f"AFTER INSERT ON runs FOR EACH ROW {_BUMP}",
    "runs_version_update": ("AFTER UPDATE OF state, not_before, priority, lease_epoch, job_id"
                            f" ON runs FOR EACH ROW {_BUMP}"),
    "runs_version_delete": f"AFTER DELETE ON runs FOR EACH ROW {_BUMP}",
}


def upgrade() -> None:
    op.create_table(
        "runs_version",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute("INSERT INTO runs_version (id, version) VALUES (1, 0)")
        for name, body in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table("runs_version")
