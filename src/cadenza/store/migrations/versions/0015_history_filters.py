"""The history by trigger and the audit log by type or actor, newest first (UI filters).

Revision ID: 0015_history_filters
Revises: 0014_resources_hot
Create Date: 2026-12-02

A runs page filtered by a trigger that matches few runs (``manual:bob``, a call_job
parent) walked the whole ``created_at`` index: 1.96 s among 1,000,000 runs on SQLite.
The audit page filtered by type or actor (``ORDER BY event_id DESC``) walked the event log
likewise. Each filter is now one ordered index range.
"""

from __future__ import annotations

from alembic import op

revision = "0015_history_filters"
down_revision = "0014_resources_hot"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_trigger_created", "runs", ["trigger", "created_at", "id"])
    op.create_index("ix_event_log_type_event", "event_log", ["event_type", "event_id"])
    op.create_index("ix_event_log_actor_event", "event_log", ["actor", "event_id"])


def downgrade() -> None:
    op.drop_index("ix_event_log_actor_event", table_name="event_log")
    op.drop_index("ix_event_log_type_event", table_name="event_log")
    op.drop_index("ix_runs_trigger_created", table_name="runs")
