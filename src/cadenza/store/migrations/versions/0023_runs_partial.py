"""Three indexes of ``runs`` partial: a run enters an index only while it is read there.

Revision ID: 0023_runs_partial
Revises: 0022_desktop
Create Date: 2026-12-06

Each update of a run (claimed, ended) moves it in every index that holds its state, and on
PostgreSQL no update of ``runs`` is a HOT update (``state`` is indexed), so the new row
version enters every index of the table. Most runs are top-level runs that end, so:

- ``ix_runs_running (state, job_id) WHERE state = 'RUNNING'`` replaces
  ``ix_runs_state_lease_until (state, lease_until)``: the decision's count of running runs
  by job, the reaper and the lease renewals read the running runs only. It also fixes a
  plan: with SQLite's statistics (after an ``ANALYZE``), the count by job walked the whole
  ``(job_id, created_at)`` index instead, 11 ms among 40,000 runs at every decision.
  ``lease_until`` is not indexed any more: a renewal changes no indexed column;
- ``ix_runs_held (state, not_before) WHERE state = 'QUEUED' AND not_before IS NOT NULL``
  replaces ``ix_runs_state_not_before_priority``: the admission's read of the runs held
  by a delay is its only reader, and most queued runs have no delay;
- ``ix_runs_parent`` keeps the children of a ``call_job`` only
  (``WHERE parent_run_id IS NOT NULL``; ``parent_run_id = ?`` implies it). Still unique.

``state`` leads the two state indexes though each holds one state: without statistics,
SQLite's planner prefers an index whose first column the WHERE fixes. The queries by
state that used the old indexes and are not these read ``ix_runs_state_created``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_runs_partial"
down_revision = "0022_desktop"
branch_labels = None
depends_on = None

RUNNING = "state = 'RUNNING'"
HELD = "state = 'QUEUED' AND not_before IS NOT NULL"
HAS_PARENT = "parent_run_id IS NOT NULL"


def upgrade() -> None:
    op.drop_index("ix_runs_state_lease_until", table_name="runs")
    op.create_index("ix_runs_running", "runs", ["state", "job_id"], sqlite_where=sa.text(RUNNING),
                    postgresql_where=sa.text(RUNNING))
    op.drop_index("ix_runs_state_not_before_priority", table_name="runs")
    op.create_index("ix_runs_held", "runs", ["state", "not_before"], sqlite_where=sa.text(HELD),
                    postgresql_where=sa.text(HELD))
    op.drop_index("ix_runs_parent", table_name="runs")
    op.create_index("ix_runs_parent", "runs", ["parent_run_id", "parent_step"], unique=True,
                    sqlite_where=sa.text(HAS_PARENT), postgresql_where=sa.text(HAS_PARENT))


def downgrade() -> None:
    op.drop_index("ix_runs_parent", table_name="runs")
    op.create_index("ix_runs_parent", "runs", ["parent_run_id", "parent_step"], unique=True)
    op.drop_index("ix_runs_held", table_name="runs")
    op.create_index("ix_runs_state_not_before_priority", "runs",
                    ["state", "not_before", "priority"])
    op.drop_index("ix_runs_running", table_name="runs")
    op.create_index("ix_runs_state_lease_until", "runs", ["state", "lease_until"])
