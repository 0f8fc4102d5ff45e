"""``cadenza backup FILE``, ``cadenza restore FILE`` and ``cadenza prune`` (docs/backup.md).

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

from pathlib import Path
from typing import Annotated

import typer

from cadenza.cli.context import handled, state
from cadenza.cli.output import err, out, print_json
from cadenza.services.backup import backup_document, pg_dump_command, restore_document

__all__ = ["pg_dump_command", "register"]

SECRETS_NOTE = ("note: the backup holds no secret values; data/secret.key and "
                "data/secrets.json are not in it. Keep a copy of both (mode 0600) in a safe "
                "place: without secret.key, secrets.json cannot be decrypted.")


def register(app: typer.Typer) -> None:
    app.command("backup")(backup)
    app.command("restore")(restore)
    app.command("prune")(prune)


def backup(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Where to write the copy.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine output.")] = False,
) -> None:
    """Copy the store to FILE while the server runs: consistent, integrity-checked, 0600."""
    services = state(ctx).configured()
    with handled():
        report = services.backup.backup(file, force=force)
    info = report.info
    if as_json:
        print_json(backup_document(report))
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
    services = state(ctx).configured()
    with handled():
        report = services.backup.restore(file)
    document = restore_document(report)
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
    services = state(ctx).configured()
    with handled():
        report = services.backup.prune(days=days, keep_last=keep_last, dry_run=dry_run)
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
