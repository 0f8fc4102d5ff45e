"""``cadenza backup FILE``, ``cadenza restore FILE`` and ``cadenza prune`` (SPEC §14, §18).

* ``backup`` copies the live SQLite store while the server runs (consistent, checked,
  0600; see :mod:`cadenza.store.maintenance`). It refuses to overwrite a file unless
  ``--force``. The secret key and ``secrets.json`` are NOT in the copy: it says so, and
  ``docs/backup.md`` says how to keep them (separately, never in a weaker-permission file).
  On PostgreSQL it exits 2 with the ``pg_dump`` command for the configured database.
* ``restore`` refuses while a ``cadenza serve`` leads this home (it takes the scheduler's
  leadership lock itself and holds it during the swap, so no server can start meanwhile),
  keeps the current database as ``cadenza.db.before-restore-<time>``, and gives every
  RUNNING run of the restored store an expired lease: the next ``cadenza serve`` reclaims
  those runs and records the fires missed since the backup per the missed-run policy.
* ``prune`` applies ``[retention]`` now (``--days`` / ``--keep-last`` override it);
  ``--dry-run`` only counts.

Exit codes: 0 done, 1 failed (nothing changed), 2 usage (PostgreSQL store, bad option).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cadenza.cli.context import state
from cadenza.cli.output import err, fail, out, print_json
from cadenza.domain.errors import CadenzaError

if TYPE_CHECKING:
    from cadenza.cli.context import CliState

SECRETS_NOTE = ("note: the backup holds no secret values; data/secret.key and "
                "data/secrets.json are not in it. Keep a copy of both (mode 0600) in a safe "
                "place: without secret.key, secrets.json cannot be decrypted.")


def register(app: typer.Typer) -> None:
    app.command("backup")(backup)
    app.command("restore")(restore)
    app.command("prune")(prune)


def _store_url(st: CliState) -> str:
    return st.config().settings.store_url(st.home.path)


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


def _not_sqlite(url: str, file: Path, *, restore: bool) -> None:
    if url.startswith("sqlite"):
        return
    command = pg_dump_command(url, str(file), restore=restore)
    what = "restore" if restore else "backup"
    fail(f"`cadenza {what}` copies SQLite stores; this home's store is PostgreSQL. Use "
         f"PostgreSQL's own tools{' (with every `cadenza serve` stopped)' if restore else ''}:"
         f"\n  {command}\n(the password comes from PGPASSWORD or ~/.pgpass)", 2)


def backup(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Where to write the copy.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Copy the store to FILE while the server runs: consistent, integrity-checked, 0600."""
    st = state(ctx)
    _not_sqlite(_store_url(st), file, restore=False)
    with st.store() as store:
        try:
            report = store.backup_sqlite(file, force=force)
        except CadenzaError as exc:
            fail(str(exc))
    info = report.info
    if as_json:
        print_json({"file": str(info.path), "bytes": info.bytes, "schema": info.revision,
                    "runs": info.runs, "runs_by_state": info.runs_by_state,
                    "events": info.events, "integrity": "ok",
                    "seconds": round(report.seconds, 3), "secrets_included": False})
        return
    states = ", ".join(f"{k} {v}" for k, v in sorted(info.runs_by_state.items())) or "none"
    out.print(f"backup written: {info.path} ({info.bytes:,} bytes, mode 0600, integrity ok, "
              f"{report.seconds:.2f}s)", markup=False)
    out.print(f"runs: {info.runs} ({states}); events: {info.events}; schema {info.revision}",
              markup=False)
    err.print(SECRETS_NOTE, markup=False)


def restore(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A file `cadenza backup` wrote.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Replace the store with a backup (refused while a server runs on this home)."""
    from cadenza.cli.run import os_user
    from cadenza.clock import clock_from_env
    from cadenza.scheduler.leader import leadership_for
    from cadenza.store import Store
    from cadenza.store.engine import create_engine, sqlite_path
    from cadenza.store.maintenance import restore_sqlite

    st = state(ctx)
    config = st.config()
    url = config.settings.store_url(st.home.path)
    _not_sqlite(url, file, restore=True)
    try:
        clock = clock_from_env()
        engine = create_engine(url)
    except (ValueError, CadenzaError) as exc:
        fail(str(exc), 2)
    database = sqlite_path(engine.url)
    if database is None:
        fail("the store is an in-memory SQLite database: there is nothing to restore into", 2)
    leader = leadership_for(engine)
    try:
        # The server_is_running() test, held: while we hold the lock no server can start.
        if not leader.acquire():
            fail("a `cadenza serve` is running on this home: stop it first, then restore "
                 "(restoring under a live server would lose what it writes)")

        def open_store(staged_url: str) -> Any:
            return Store.open(staged_url, clock=clock, redactor=st.home.redactor,
                              sqlite_synchronous=config.settings.store.sqlite_synchronous)

        try:
            report = restore_sqlite(database, file, now=clock.now(), actor=os_user(),
                                    open_store=open_store)
        except CadenzaError as exc:
            fail(f"restore from {file} refused, nothing changed: {exc}")
    finally:
        leader.release()
        close = getattr(leader, "close", None)
        if close is not None:
            close()
        engine.dispose()
    document = {
        "restored_from": str(report.source), "database": str(report.database),
        "previous_database_kept_as": str(report.kept) if report.kept else None,
        "schema_in_file": report.revision_in_file, "schema_now": report.revision_now,
        "runs": report.runs, "expired_leases": report.expired_leases,
    }
    if as_json:
        print_json(document)
        return
    out.print(f"restored {report.database} from {report.source} ({report.runs} runs, "
              f"schema {report.revision_in_file}"
              + (f", upgraded to {report.revision_now})" if report.revision_now !=
                 report.revision_in_file else ")"), markup=False)
    if report.kept:
        out.print(f"the previous database is kept as {report.kept}", markup=False)
    out.print(f"{len(report.expired_leases)} RUNNING run(s) now have an expired lease: the "
              "next `cadenza serve` reclaims them and resumes them from their checkpoint",
              markup=False)
    out.print("at the next start the scheduler records the fires missed since the backup "
              "as its missed-run policy says (runs already recorded are not fired again)",
              markup=False)
    err.print("note: data/secret.key and data/secrets.json are not part of a backup and "
              "were left as they are; restore them from where you keep them if needed",
              markup=False)


def prune(
    ctx: typer.Context,
    days: Annotated[int | None, typer.Option(
        "--days", min=1, max=36_500, help="Delete finished runs older than this "
        "([retention].days).")] = None,
    keep_last: Annotated[int | None, typer.Option(
        "--keep-last", min=0, max=1_000_000, help="Always keep this many finished runs per "
        "job ([retention].keep_last_per_job).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count; delete nothing.")
                       ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Delete old finished runs (with steps, logs, checkpoints) and old events now."""
    from cadenza.cli.run import os_user

    st = state(ctx)
    retention = st.config().settings.retention
    with st.store() as store:
        try:
            report = store.prune(
                days=days if days is not None else retention.days,
                keep_last=keep_last if keep_last is not None else retention.keep_last_per_job,
                dry_run=dry_run, actor=os_user())
        except CadenzaError as exc:
            fail(str(exc))
    if as_json:
        print_json(report.as_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    states = ", ".join(f"{k} {v}" for k, v in sorted(report.runs_by_state.items()))
    out.print(f"{verb} {report.runs} run(s){f' ({states})' if states else ''}, "
              f"{report.step_runs} step run(s), {report.logs} log line(s), "
              f"{report.events} event(s) older than {report.days} days "
              f"(before {report.cutoff.isoformat(timespec='seconds')}), keeping the last "
              f"{report.keep_last} finished runs of each job; QUEUED, RUNNING and "
              "NEEDS_REVIEW runs are never pruned", markup=False)
