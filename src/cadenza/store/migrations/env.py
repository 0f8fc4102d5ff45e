"""Alembic environment for Cadenza's store.

Cadenza runs its migrations itself (``Store.open(..., migrate=True)``), passing an open
connection through ``config.attributes["connection"]``; the connection is already inside the
store's write transaction, so every migration of one upgrade commits or rolls back together.
"""

from __future__ import annotations

from alembic import context

from cadenza.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError(
        "Cadenza applies its schema migrations itself: open the store with "
        "Store.open(url, migrate=True) instead of running alembic directly"
    )

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
