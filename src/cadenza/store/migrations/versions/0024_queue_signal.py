"""PostgreSQL: ``NOTIFY cadenza_queued`` when a run becomes QUEUED.

Revision ID: 0024_queue_signal
Revises: 0023_runs_partial
Create Date: 2026-12-07

A row trigger of ``runs``, run only for a row whose new state is QUEUED (its ``WHEN`` is
checked without calling the function, so a claim or an end pays nothing): a run created
QUEUED, or queued again (a retry, the reaper, an operator's retry). ``pg_notify`` is
delivered when the transaction commits, once per transaction whatever the number of rows;
every dispatcher listens (``cadenza.store.queue_signal``) and wakes at once instead of at
its next poll. SQLite has nothing to do: a dispatcher there sees every commit through
``PRAGMA data_version``.
"""

from __future__ import annotations

from alembic import op

revision = "0024_queue_signal"
down_revision = "0023_runs_partial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE FUNCTION cadenza_runs_signal_queued() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        "PERFORM pg_notify('cadenza_queued', ''); RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER runs_signal_queued_insert AFTER INSERT ON runs "
        "FOR EACH ROW WHEN (NEW.state = 'QUEUED') "
        "EXECUTE FUNCTION cadenza_runs_signal_queued()"
    )
    op.execute(
        "CREATE TRIGGER runs_signal_queued_update AFTER UPDATE OF state ON runs "
        "FOR EACH ROW WHEN (NEW.state = 'QUEUED' AND OLD.state <> 'QUEUED') "
        "EXECUTE FUNCTION cadenza_runs_signal_queued()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER runs_signal_queued_update ON runs")
    op.execute("DROP TRIGGER runs_signal_queued_insert ON runs")
    op.execute("DROP FUNCTION cadenza_runs_signal_queued()")
