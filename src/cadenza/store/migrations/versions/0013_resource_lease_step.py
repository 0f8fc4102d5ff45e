"""The step that holds a resource (a step's ``requires`` and ``via``, docs/pools.md).

Revision ID: 0013_resource_lease_step
Revises: 0012_runs_state_created
Create Date: 2026-12-01

``resources.lease_step``: the name of the step whose start leased the member, which its end
releases; NULL when the run holds it for its whole run (the job's ``requires``, taken with
the claim). Only meaningful while the member is LEASED or RUNNING; the run's own lease
(``lease_owner``) stays the run's either way, so the reaper and a run's end release both.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_resource_lease_step"
down_revision = "0012_runs_state_created"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("resources", sa.Column("lease_step", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("resources") as batch:
        batch.drop_column("lease_step")
