"""Schema migrations, run programmatically (no ``alembic.ini`` on disk).

The migration scripts live in the package (``cadenza/store/migrations``); :func:`alembic_config`
builds the Alembic ``Config`` in code and hands Alembic an open connection, so a migration runs
inside one store write transaction (``BEGIN IMMEDIATE`` on SQLite; on PostgreSQL under a
transaction-scoped advisory lock, so that nodes starting together migrate once).

A database whose revision this code does not know was migrated by a newer Cadenza: it is
refused with a :class:`StoreError` rather than used with a schema we cannot read correctly.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from cadenza.domain.errors import StoreError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"
_PG_MIGRATION_LOCK = 0x43_41_44_45_4E_5A_41  # "CADENZA": one advisory lock id for migrations


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations (and ``connection``, if given)."""
    config = Config()
    # ConfigParser interpolates "%": escape it in the path.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def script_directory() -> ScriptDirectory:
    """The packaged migration scripts."""
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision this code knows."""
    head = script_directory().get_current_head()
    if head is None:
        raise StoreError("no schema migrations are packaged with this Cadenza")
    return head


def current_revisions(connection: sa.Connection) -> tuple[str, ...]:
    """The revisions recorded in the database (empty for a fresh database)."""
    return tuple(MigrationContext.configure(connection).get_current_heads())


def check_known(connection: sa.Connection) -> tuple[str, ...]:
    """The database's revisions; :class:`StoreError` if any is newer than this code."""
    revisions = current_revisions(connection)
    known = {script.revision for script in script_directory().walk_revisions()}
    unknown = [rev for rev in revisions if rev not in known]
    if unknown:
        raise StoreError(
            f"the store's schema revision {', '.join(unknown)} is newer than this Cadenza "
            f"knows (newest: {head_revision()}); upgrade Cadenza, or restore a backup made "
            "by this version"
        )
    return revisions


def upgrade(connection: sa.Connection) -> None:
    """Migrate the database to the head revision, inside the caller's transaction."""
    if connection.dialect.name == "postgresql":
        connection.execute(
            sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
        )
    if check_known(connection) == (head_revision(),):
        return
    command.upgrade(alembic_config(connection), "head")


def require_head(connection: sa.Connection) -> None:
    """:class:`StoreError` unless the database is exactly at the head revision."""
    revisions = check_known(connection)
    head = head_revision()
    if revisions != (head,):
        found = ", ".join(revisions) or "no schema"
        raise StoreError(
            f"the store has {found}, this Cadenza needs schema {head}: "
            "open it with migrations enabled (or run `cadenza serve` once) to upgrade it"
        )
