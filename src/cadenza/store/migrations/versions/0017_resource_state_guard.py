"""Resource state transitions refused by the database too: triggers from the state table.

Revision ID: 0017_resource_state_guard
Revises: 0016_event_log_partial
Create Date: 2027-01-04

The store moves a member only by compare-and-swap on the states its table allows; these
triggers (:mod:`cadenza.store.state_guard`, generated from
``cadenza.domain.states.RESOURCE_TRANSITIONS`` and the leaser's shortcuts) make the database
refuse any other change of ``resources.state`` as well, whoever writes it. They fire only
when ``state`` is set (``UPDATE OF state``) and, on PostgreSQL, only when it changes; the
lease renewals, which do not set it, never run them.
"""

from __future__ import annotations

from alembic import op

from cadenza.store.state_guard import create_guard, drop_guard

revision = "0017_resource_state_guard"
down_revision = "0016_event_log_partial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in [*drop_guard(dialect), *create_guard(dialect)]:
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_guard(op.get_bind().dialect.name):
        op.execute(statement)
