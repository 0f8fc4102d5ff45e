"""A user's language and time zone: the pages and the e-mails they receive speak it.

Revision ID: 0018_user_language
Revises: 0017_resource_state_guard
Create Date: 2027-01-10

Both are optional: without a language the pages follow the browser (or the language
cookie) and e-mails the server's ``[server] language``; without a zone, times are the
server's or the job's zone as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_user_language"
down_revision = "0017_resource_state_guard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("language", sa.String(16), nullable=True))
        batch.add_column(sa.Column("timezone", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("timezone")
        batch.drop_column("language")
