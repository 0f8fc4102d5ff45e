"""Backup, restore and pruning of the store.

Operations::

    backup(file, force=False) -> BackupReport       a consistent, checked, 0600 copy
    restore(file) -> RestoreReport                  refused while a server leads the home
    prune(days=None, keep_last=None, dry_run=False) -> PruneReport

``backup`` and ``restore`` copy SQLite stores; for a PostgreSQL store they raise
InvalidRequest with the ``pg_dump`` / ``pg_restore`` command for the configured database.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadenza.domain.errors import CadenzaError
from cadenza.services.errors import InvalidRequest, Refused

if TYPE_CHECKING:
    from cadenza.services.context import Services
    from cadenza.store import Store
    from cadenza.store.maintenance import BackupReport, PruneReport, RestoreReport


def pg_dump_command(url: str, target: str, *, restore: bool = False) -> str:
    """The ``pg_dump`` (or ``pg_restore``) command line for the store ``url``, without
    its password (``pg_dump`` reads it from ``PGPASSWORD`` or ``~/.pgpass``)."""
    import sqlalchemy as sa

    given = sa.make_url(url)
    # URL.set(password=None) means "unchanged": build the URL again without it.
    parsed = sa.URL.create("postgresql", username=given.username, host=given.host,
                           port=given.port, database=given.database, query=given.query)
    libpq = parsed.render_as_string(hide_password=False)
    if restore:
        return (f"pg_restore --clean --if-exists --no-owner --dbname={shlex.quote(libpq)} "
                f"{shlex.quote(target)}")
    return f"pg_dump --format=custom --file={shlex.quote(target)} --dbname={shlex.quote(libpq)}"


def _require_sqlite(url: str, file: Path, *, restore: bool) -> None:
    if url.startswith("sqlite"):
        return
    command = pg_dump_command(url, str(file), restore=restore)
    what = "restore" if restore else "backup"
    raise InvalidRequest(
        f"`cadenza {what}` copies SQLite stores; this home's store is PostgreSQL. Use "
        f"PostgreSQL's own tools{' (with every `cadenza serve` stopped)' if restore else ''}:"
        f"\n  {command}\n(the password comes from PGPASSWORD or ~/.pgpass)")


class BackupService:
    def __init__(self, services: Services) -> None:
        self.services = services

    def _url(self) -> str:
        return self.services.config().settings.store_url(self.services.home.path)

    def backup(self, file: Path, *, force: bool = False) -> BackupReport:
        """Copy the store to ``file`` while a server may run (refuses an existing file
        unless ``force``). The copy holds no secret values."""
        _require_sqlite(self._url(), file, restore=False)
        return self.services.store().backup_sqlite(file, force=force)

    def restore(self, file: Path) -> RestoreReport:
        """Replace the store with the backup ``file``: refused while a `cadenza serve`
        leads this home (the leadership is held during the swap), the current database
        kept as ``cadenza.db.before-restore-<time>``, every RUNNING run of the restored
        store given an expired lease."""
        from cadenza.scheduler.leader import leadership_for
        from cadenza.store import Store
        from cadenza.store.engine import create_engine, sqlite_path
        from cadenza.store.maintenance import restore_sqlite

        services = self.services
        config = services.config()
        url = self._url()
        _require_sqlite(url, file, restore=True)
        try:
            engine = create_engine(url)
        except (ValueError, CadenzaError) as exc:
            raise InvalidRequest(str(exc)) from None
        database = sqlite_path(engine.url)
        if database is None:
            engine.dispose()
            raise InvalidRequest("the store is an in-memory SQLite database: there is "
                                 "nothing to restore into")
        leader = leadership_for(engine)
        try:
            # While we hold the lock no server can start.
            if not leader.acquire():
                raise Refused("a `cadenza serve` is running on this home: stop it first, "
                              "then restore (restoring under a live server would lose what "
                              "it writes)")

            def open_store(staged_url: str) -> Store:
                return Store.open(staged_url, clock=services.clock,
                                  redactor=services.home.redactor,
                                  sqlite_synchronous=config.settings.store.sqlite_synchronous)

            try:
                return restore_sqlite(database, file, now=services.clock.now(),
                                      actor=services.actor.id, open_store=open_store)
            except CadenzaError as exc:
                raise Refused(f"restore from {file} refused, nothing changed: {exc}") \
                    from None
        finally:
            leader.close()
            engine.dispose()

    def prune(self, *, days: int | None = None, keep_last: int | None = None,
              dry_run: bool = False) -> PruneReport:
        """Delete finished runs (with steps, logs, checkpoints) and events older than
        ``days`` now, keeping the last ``keep_last`` finished runs per job ([retention]
        gives the defaults); ``dry_run`` only counts."""
        retention = self.services.config().settings.retention
        return self.services.store().prune(
            days=days if days is not None else retention.days,
            keep_last=keep_last if keep_last is not None else retention.keep_last_per_job,
            dry_run=dry_run, actor=self.services.actor.id)


def backup_document(report: BackupReport) -> dict[str, Any]:
    """The ``backup --json`` document."""
    info = report.info
    return {"file": str(info.path), "bytes": info.bytes, "schema": info.revision,
            "runs": info.runs, "runs_by_state": info.runs_by_state, "events": info.events,
            "integrity": "ok", "seconds": round(report.seconds, 3), "secrets_included": False}


def restore_document(report: RestoreReport) -> dict[str, Any]:
    """The ``restore --json`` document."""
    return {"restored_from": str(report.source), "database": str(report.database),
            "previous_database_kept_as": str(report.kept) if report.kept else None,
            "schema_in_file": report.revision_in_file, "schema_now": report.revision_now,
            "runs": report.runs, "expired_leases": report.expired_leases}
