"""The event log's index by type and time keeps the events that name a resource only.

Revision ID: 0025_event_type_time
Revises: 0024_queue_signal
Create Date: 2026-12-07

``ix_event_log_event_type_created_at`` was entered by every event, four per run, though
only the reads of a pool's history look events up by type and time: the pool figures
(leases, releases and state changes of a window), a pool's utilization, and the recent
health checks. Those events all name a resource. It becomes
``ix_event_log_resource_type_created``, ``(event_type, created_at) WHERE resource_id IS
NOT NULL``: a run's events (no resource) stay out of it, and those reads say
``resource_id IS NOT NULL``, which the index's condition is implied by.

The other reads by type and time (the audit log's filters, ``GET /api/events?type=&since=``,
``cadenza events --type --since``) start at the first event of the window instead, by
``event_id`` along ``ix_event_log_type_event``, the window's first event found on
``ix_event_log_created_at``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_event_type_time"
down_revision = "0024_queue_signal"
branch_labels = None
depends_on = None

HAS_RESOURCE = "resource_id IS NOT NULL"


def upgrade() -> None:
    op.drop_index("ix_event_log_event_type_created_at", table_name="event_log")
    op.create_index("ix_event_log_resource_type_created", "event_log",
                    ["event_type", "created_at"], sqlite_where=sa.text(HAS_RESOURCE),
                    postgresql_where=sa.text(HAS_RESOURCE))


def downgrade() -> None:
    op.drop_index("ix_event_log_resource_type_created", table_name="event_log")
    op.create_index("ix_event_log_event_type_created_at", "event_log",
                    ["event_type", "created_at"])
