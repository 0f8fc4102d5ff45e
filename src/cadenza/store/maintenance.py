"""Backup, restore and retention of the store (docs/backup.md).

Backup (SQLite only)
    ``VACUUM INTO`` on a connection of its own: one read transaction over a WAL snapshot, so
    the copy is consistent (it holds every transaction committed before it began, none
    after) and writers are never blocked (in WAL mode a reader does not hold the write
    lock). The copy is written to a temporary file created 0600 in the target's directory
    (``VACUUM INTO`` keeps the mode of an existing empty file), checked with
    ``PRAGMA integrity_check`` and only then renamed onto the target; a copy that fails the
    check is deleted. The copy is a single self-contained file (rollback journal mode, no
    ``-wal``). File modes are POSIX: on Windows the file inherits the directory's ACL.
    The secret key and ``secrets.json`` are not in the database and are not copied.

Restore (SQLite only; the caller makes sure no server runs)
    The file must be a SQLite database that passes ``integrity_check`` and carries a Cadenza
    schema revision this code knows (a newer one is refused, an older one is upgraded). It is
    staged next to the live database, migrated, every RUNNING run's lease is made expired
    (``lease_until`` in the past, so that the next ``cadenza serve`` reclaims it) and a
    STORE_RESTORED event is written. The live database is folded into one file (WAL
    checkpointed, journal mode DELETE: this fails while another process has it open), kept as
    ``<name>.before-restore-<UTC time>`` (a hard link, else a copy) and the staged file is
    renamed over it: at every instant the live name holds either the old or the new store.

Retention
    :meth:`MaintenanceRepository.prune` deletes finished runs (SUCCEEDED, FAILED, CANCELED,
    MISSED; never QUEUED, RUNNING or NEEDS_REVIEW) that ended (or, never started, were
    created) before ``now - days`` and are not among the ``keep_last`` most recent finished
    runs of their job; their step runs, log lines and checkpoints go with them (foreign keys
    ``ON DELETE CASCADE``; SQLite's ``foreign_keys`` pragma is on in every connection).
    Then events older than the cutoff whose run no longer exists (or that name no run) are
    deleted: the audit log is append-only (a trigger refuses UPDATE) and retention is its one
    documented exception, recorded by a RETENTION_PRUNED event saying what went. Operation
    keys are kept (an effect must never be applied twice, even for a pruned run); schedule
    cursors, not old rows, decide what was fired, so pruning a MISSED row never re-fires it.
    Deletes go in batches of ``batch_size`` rows per transaction, so that a large prune never
    holds SQLite's single writer for long.

The write-ahead log (SQLite)
    :meth:`MaintenanceRepository.check_wal` tells a log that grows because a reader holds an
    old snapshot: SQLite cannot copy frames that an open read transaction may still need
    into the database, so a reader that stays open (a long backup, an open ``sqlite3``
    shell, a process stopped in a read) keeps the log from being emptied and every commit
    makes it longer. The checkpoint's own result says so (it copied fewer frames than the
    log holds). Which reader: on Linux the read locks of ``/proc/locks`` on the ``-shm``
    file name the processes that hold an old read mark (their pid and command line, "this
    process" for ours); elsewhere, or when the system does not say, it is only "a reader".
    A process holds one lock per read mark for all its connections: which connection of
    that process is not known. Once every frame is copied (the reader ended), the same look
    cuts the ``-wal`` file back to zero bytes (a ``TRUNCATE`` checkpoint waiting at most
    :data:`WAL_TRUNCATE_WAIT_MS`): SQLite reuses the file from its start but never
    shrinks it by itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cadenza.domain.errors import DISK_FULL, StoreError, file_write_failed, write_failure_kind
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store.codec import require_aware
from cadenza.store.engine import SQLITE_BUSY_TIMEOUT_MS, sqlite_path
from cadenza.store.lease_clock import OS_CLOCK, LeaseClock
from cadenza.store.tables import IS_RUNNING, checkpoints, event_log, run_logs, runs, step_runs

FINISHED_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELED, RunState.MISSED)
"""The states retention may delete; QUEUED, RUNNING and NEEDS_REVIEW are never touched."""
_FINISHED = [s.value for s in FINISHED_STATES]
BATCH_SIZE = 1000
BATCH_PAUSE = 0.02
"""Seconds between two delete batches: other writers of this process queue on a lock that
is not fair, and would otherwise wait behind many batches in a row."""
SQLITE_MAGIC = b"SQLite format 3\x00"
_BUSY_MS = 10_000
WAL_TRUNCATE_WAIT_MS = 200
"""How long cutting an emptied write-ahead log back waits for the readers and writers of the
moment (milliseconds) before it leaves it for the next look."""
_SHM_READ_LOCK = 123
"""The byte of the ``-shm`` file a reader locks for read mark 0 (mark ``i``: + ``i``):
SQLite's unix VFS locks byte 120 + lock index, and read mark ``i`` is lock index 3 + i."""
_SHM_HEADER = 136
"""Bytes of the ``-shm`` file read: two WAL-index headers (48 bytes each), then the
checkpoint info: nBackfill (offset 96) and the five read marks (offsets 100-119)."""


@dataclass(frozen=True)
class StoreFileInfo:
    """What a SQLite file holds, as far as backup and restore care."""

    path: Path
    bytes: int
    revision: str
    runs: int
    runs_by_state: dict[str, int]
    events: int


@dataclass(frozen=True)
class BackupReport:
    """A finished backup: where, how big, what it holds, how long it took."""

    info: StoreFileInfo
    seconds: float


@dataclass(frozen=True)
class RestoreReport:
    """A finished restore (see the module doc)."""

    source: Path
    database: Path
    kept: Path | None
    revision_in_file: str
    revision_now: str
    runs: int
    expired_leases: list[str]


@dataclass
class PruneReport:
    """What a prune deleted (or, with ``dry_run``, would delete)."""

    cutoff: datetime
    days: int
    keep_last: int
    dry_run: bool
    runs: int = 0
    runs_by_state: dict[str, int] = field(default_factory=dict)
    step_runs: int = 0
    logs: int = 0
    checkpoints: int = 0
    events: int = 0
    batches: int = 0
    seconds: float = 0.0
    longest_batch_seconds: float = 0.0
    event_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (``cadenza prune --json``, the RETENTION_PRUNED payload)."""
        return {
            "cutoff": self.cutoff.isoformat(), "days": self.days, "keep_last": self.keep_last,
            "dry_run": self.dry_run, "runs": self.runs,
            "runs_by_state": dict(sorted(self.runs_by_state.items())),
            "step_runs": self.step_runs, "logs": self.logs, "checkpoints": self.checkpoints,
            "events": self.events, "batches": self.batches,
            "seconds": round(self.seconds, 3),
            "longest_batch_seconds": round(self.longest_batch_seconds, 4),
        }


# -- files ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _sqlite(path: Path, *, readonly: bool = False) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection of its own (autocommit), closed afterwards."""
    uri = f"{path.resolve().as_uri()}?mode=ro" if readonly else str(path)
    try:
        con = sqlite3.connect(uri, uri=readonly, timeout=_BUSY_MS / 1000,
                              isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        yield con
    finally:
        con.close()


def _create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (fails if it exists)."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0)
    os.close(os.open(path, flags, 0o600))


def _remove(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _sidecars(path: Path) -> tuple[Path, Path, Path]:
    return (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"),
            path.with_name(path.name + "-journal"))


def inspect_sqlite_file(path: Path) -> StoreFileInfo:
    """Check that ``path`` is a sound Cadenza SQLite store and say what it holds.

    Raises :class:`StoreError` naming the file when it is missing, not SQLite, fails
    ``PRAGMA integrity_check``, has no Cadenza schema, or has a schema revision newer than
    this code knows. Reads only.
    """
    from cadenza.store import migrate as migrations

    if not path.is_file():
        raise StoreError(f"{path}: no such file")
    with path.open("rb") as fh:
        if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise StoreError(f"{path} is not a SQLite database")
    with _sqlite(path) as con:
        try:
            problems = [row[0] for row in con.execute("PRAGMA integrity_check").fetchall()]
            tables = {row[0] for row in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if migrations.VERSION_TABLE not in tables or "runs" not in tables:
                raise StoreError(f"{path} is a SQLite database but not a Cadenza store "
                                 "(no alembic_version or runs table)")
            revisions = [row[0] for row in con.execute(
                f"SELECT version_num FROM {migrations.VERSION_TABLE}")]
            by_state = dict(con.execute("SELECT state, count(*) FROM runs GROUP BY state")
                            .fetchall())
            events = int(con.execute("SELECT count(*) FROM event_log").fetchone()[0]) \
                if "event_log" in tables else 0
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path} cannot be read as a Cadenza store: {exc}") from exc
    if problems != ["ok"]:
        shown = "; ".join(problems[:5])
        raise StoreError(f"{path} failed PRAGMA integrity_check: {shown}")
    if len(revisions) != 1:
        raise StoreError(f"{path} has no single schema revision ({revisions or 'none'})")
    known = {s.revision for s in migrations.script_directory().walk_revisions()}
    if revisions[0] not in known:
        raise StoreError(
            f"{path} has schema revision {revisions[0]}, newer than this Cadenza knows "
            f"(newest: {migrations.head_revision()}): restore it with the Cadenza that made it")
    return StoreFileInfo(path, path.stat().st_size, revisions[0], sum(by_state.values()),
                         {str(k): int(v) for k, v in by_state.items()}, events)


def fold_into_one_file(path: Path) -> None:
    """Checkpoint ``path``'s WAL into it and switch it to rollback journal mode, so that
    the database is one self-contained file. Raises :class:`StoreError` when another
    connection has it open (the journal mode cannot change then)."""
    with _sqlite(path) as con:
        con.execute("PRAGMA busy_timeout = 0")
        try:
            busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            mode = con.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{path} is in use by another process ({exc}): stop every "
                             "`cadenza serve` and `cadenza run` on this home first") from exc
    if (busy is not None and busy[0]) or str(mode).lower() != "delete":
        raise StoreError(f"{path} is in use by another process (its WAL could not be "
                         "checkpointed): stop every `cadenza serve` and `cadenza run` first")


def restore_sqlite(database: Path, source: Path, *, now: datetime, actor: str,
                   open_store: Callable[[str], MaintenanceRepository]) -> RestoreReport:
    """Replace the SQLite store ``database`` with the backup ``source`` (module doc).

    ``open_store(url)`` opens (and migrates) a store on a staged file: the caller passes
    one with its clock and redactor. The caller holds the scheduler's leadership lock, so
    that no server starts during the swap. Raises :class:`StoreError` (nothing changed)
    when the file is not a sound store or the live database is in use.
    """
    from cadenza.store import migrate as migrations

    source = source.resolve()
    database = database.resolve()
    if source == database:
        raise StoreError(f"{source} is the live store itself")
    info = inspect_sqlite_file(source)
    stamp = require_aware(now, "now").strftime("%Y%m%dT%H%M%SZ")
    staged = database.with_name(f".{database.name}.restore-{os.getpid()}.tmp")
    _remove(staged, *_sidecars(staged))
    _create_private(staged)
    try:
        with _sqlite(source) as con:
            con.execute("VACUUM INTO ?", (str(staged),))
        store = open_store(f"sqlite:///{staged.as_posix()}")
        try:
            expired = store._expire_run_leases(now, actor=actor, source=str(source))
            with store.read() as conn:
                revision_now = migrations.current_revisions(conn)[0]
        finally:
            store.close()
        fold_into_one_file(staged)
        kept: Path | None = None
        if database.exists():
            fold_into_one_file(database)
            kept = database.with_name(f"{database.name}.before-restore-{stamp}")
            try:
                os.link(database, kept)
            except OSError:  # no hard links here (FAT, some shares): a full copy instead
                shutil.copy2(database, kept)
        _remove(*_sidecars(database))
        os.replace(staged, database)
    except BaseException:
        _remove(staged, *_sidecars(staged))
        raise
    return RestoreReport(source, database, kept, info.revision, revision_now, info.runs,
                         expired)


# -- the write-ahead log ---------------------------------------------------------------------


@dataclass(frozen=True)
class WalCheck:
    """What :meth:`MaintenanceRepository.check_wal` found (a log past its threshold)."""

    database: Path
    threshold: int
    file_bytes: int
    """The size of the ``-wal`` file (it keeps its largest size until emptied)."""
    frames: int
    """Frames (pages written) in the log now."""
    checkpointed: int
    """Frames the checkpoint has copied into the database."""
    log_bytes: int
    """What the frames take: ``frames`` x (page size + 24) + 32."""
    busy: bool
    """Another checkpoint ran at the same time: nothing can be told this time."""
    readers: tuple[str, ...] | None
    """The processes holding an old snapshot, as ``pid N (command line)``; None when the
    system does not say (only "a reader" is known)."""
    truncated: bool = False
    """The log was all copied into the database, and the ``-wal`` file cut back to zero
    bytes (a ``TRUNCATE`` checkpoint): SQLite itself keeps the file at its largest size."""

    @property
    def stuck(self) -> bool:
        """The log holds more than the threshold and its checkpoint could not complete."""
        return not self.busy and self.checkpointed < self.frames \
            and self.log_bytes > self.threshold

    @property
    def holder(self) -> str:
        """Who keeps the log from being emptied, as far as the store can tell."""
        if self.readers:
            return "a reader in " + ", ".join(self.readers)
        return "a reader (which process, the operating system does not say here)"

    @property
    def message(self) -> str:
        """The warning, for the log and the WAL_GROWING event."""
        return (f"the SQLite write-ahead log of {self.database.name} holds "
                f"{_mib(self.log_bytes)} (more than {_mib(self.threshold)}) and its "
                f"checkpoint stopped at frame {self.checkpointed} of {self.frames}: "
                f"{self.holder} holds an old snapshot open. The log is emptied once that read "
                "transaction ends (a long backup, an open sqlite3 shell, a stopped process)")


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"


def wal_readers(shm: Path, frames: int) -> tuple[str, ...] | None:
    """The processes whose read transaction holds a snapshot older than ``frames`` in the
    WAL whose index is ``shm``: the read locks of ``/proc/locks`` (Linux) on its read marks:
    mark 0 (a reader of the database file alone: no frame may be copied under it) and marks
    1-4 below ``frames`` (all of them when the marks cannot be read). None when the system
    does not say (no ``/proc/locks``, no lock found)."""
    locks = Path("/proc/locks")
    try:
        st = shm.stat()
        table = locks.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    marks: tuple[int, ...] | None = None
    try:
        with shm.open("rb") as fh:
            head = fh.read(_SHM_HEADER)
        if len(head) == _SHM_HEADER:
            marks = struct.unpack_from("=5I", head, 100)
    except OSError:
        pass
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    for line in table.splitlines():
        parts = line.split()
        if "->" in parts or len(parts) < 8 or parts[3] != "READ" or parts[5] != device:
            continue
        try:
            pid, start = int(parts[4]), int(parts[6])
            end = int(parts[7]) if parts[7] != "EOF" else 1 << 62
        except ValueError:
            continue
        for mark in range(5):
            byte = _SHM_READ_LOCK + mark
            old = mark == 0 or marks is None or marks[mark] < frames
            if start <= byte <= end and old and pid > 0 and pid not in pids:
                pids.append(pid)
    return tuple(_process(pid) for pid in pids) or None


def _process(pid: int) -> str:
    """``pid N (command line)`` for people; "this process" for ours."""
    if pid == os.getpid():
        return f"this process (pid {pid})"
    try:
        import psutil  # type: ignore[import-untyped]

        command = " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
    except Exception:  # gone, or not ours to look at
        return f"pid {pid}"
    return f"pid {pid} ({' '.join(command.split())[:160]})"


# -- the store mixin -----------------------------------------------------------------------


class MaintenanceRepository(LeaseClock):
    """Backup, retention and the write-ahead log over the store's own database."""

    def _sqlite_file(self) -> Path:
        """The database file of a SQLite store; :class:`StoreError` for other stores."""
        path = sqlite_path(self.engine.url) if self.dialect == "sqlite" else None
        if path is None:
            raise StoreError(f"the store is not a SQLite file ({self.dialect})")
        return path.resolve()

    def backup_sqlite(self, target: Path, *, force: bool = False) -> BackupReport:
        """Write a consistent, integrity-checked copy of the live SQLite store to ``target``.

        Online: writers go on during the copy (module doc). ``target`` is refused when it
        exists, unless ``force``; it is written 0600 and replaced atomically, so a failed
        backup leaves no partial file and no old backup half-overwritten.
        """
        source = self._sqlite_file()
        target = target.resolve()
        if target == source:
            raise StoreError(f"{target} is the live store itself")
        if target.exists() and not force:
            raise StoreError(f"{target} exists; pass --force to overwrite it")
        if not target.parent.is_dir():
            raise StoreError(f"{target.parent}: no such directory")
        staged = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        started = self.clock.monotonic()
        try:
            _remove(staged)
            _create_private(staged)
            with _sqlite(source) as con:
                con.execute("VACUUM INTO ?", (str(staged),))
            info = inspect_sqlite_file(staged)
            if target.exists() and not force:
                raise StoreError(f"{target} appeared during the backup; pass --force")
            os.replace(staged, target)
        except (sqlite3.Error, OSError) as exc:
            with contextlib.suppress(OSError):  # a read-only disk refuses even this
                _remove(staged)
            kind = write_failure_kind(exc)
            if kind is None and isinstance(exc, OSError):
                raise
            if kind is None:
                raise StoreError(f"backup to {target} failed: {exc}") from exc
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            kept = " (the backup already there is kept)" if target.exists() else ""
            raise file_write_failed(
                kind, f"backup to {target} not written: {kind} ({detail}); no partial file "
                f"is left{kept} and the store is unchanged; "
                f"{'free space on' if kind == DISK_FULL else 'make writable'} the disk of "
                f"{target.parent} (or write the backup elsewhere) and try again",
                detail, getattr(exc, "errno", None)) from exc
        except BaseException:
            with contextlib.suppress(OSError):
                _remove(staged)
            raise
        info = StoreFileInfo(target, info.bytes, info.revision, info.runs, info.runs_by_state,
                             info.events)
        return BackupReport(info, self.clock.monotonic() - started)

    def _expire_run_leases(self, now: datetime, *, actor: str = "restore",
                              source: str = "") -> list[str]:
        """Set ``lease_until`` one second before ``now``, the store's time and the host's
        clock, whichever is earliest (whichever judges the store next, the leases have
        expired), on every RUNNING run (a restored store: the workers that held them are
        gone) and write one STORE_RESTORED event. Returns the ids of those runs. Changes
        nothing else: the reclaim at the next ``cadenza serve`` start re-queues them."""
        past = min(require_aware(now, "now"), self._store_time(),
                   OS_CLOCK.now()) - timedelta(seconds=1)
        with self.write() as conn:
            ids = [row[0] for row in conn.execute(
                sa.select(runs.c.id).where(IS_RUNNING)
                .order_by(runs.c.id))]
            if ids:
                conn.execute(
                    sa.update(runs).where(IS_RUNNING)
                    .values(lease_until=past, updated_at=now))
            self._insert_event(
                conn, EventType.STORE_RESTORED,
                f"store restored from a backup; {len(ids)} RUNNING run(s) get an expired "
                "lease and are reclaimed at the next start",
                level=Level.WARNING, actor=actor, now=now,
                payload={"source": source, "expired_leases": len(ids), "runs": ids[:100]})
        return ids

    # -- the write-ahead log ------------------------------------------------------------------

    def check_wal(self, threshold: int) -> WalCheck | None:
        """SQLite file stores whose ``-wal`` file is larger than ``threshold`` bytes (one
        ``stat`` otherwise): a PASSIVE checkpoint (it waits for nobody and copies what it
        can), whose result says whether a reader keeps the log from being emptied, and who
        that reader is where the system tells (see the module doc). None for other stores or
        a smaller file. Writes nothing but the checkpoint's copy."""
        path = sqlite_path(self.engine.url) if self.dialect == "sqlite" else None
        if path is None:
            return None
        wal = path.with_name(path.name + "-wal")
        try:
            size = wal.stat().st_size
        except OSError:
            return None
        if size <= threshold:
            return None
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            busy, frames, copied = cursor.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            page = int(cursor.execute("PRAGMA page_size").fetchone()[0])
        finally:
            raw.close()
        frames, copied = max(int(frames), 0), max(int(copied), 0)
        found = WalCheck(path.resolve(), threshold, size, frames, copied,
                         frames * (page + 24) + 32 if frames else 0, bool(busy), None)
        if not found.busy and copied >= frames:
            return replace(found, truncated=self._truncate_wal())
        if not found.stuck:
            return found
        readers = wal_readers(path.with_name(path.name + "-shm"), frames)
        return WalCheck(found.database, threshold, size, frames, copied, found.log_bytes,
                        found.busy, readers)

    def _truncate_wal(self) -> bool:
        """Cut the ``-wal`` file, whose frames are all in the database, back to zero bytes
        (``PRAGMA wal_checkpoint(TRUNCATE)``). It waits at most :data:`WAL_TRUNCATE_WAIT_MS`
        for the readers and writers of the moment, so that writers are never held up
        longer; True when it was done (else the next look tries again)."""
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {WAL_TRUNCATE_WAIT_MS}")
            try:
                busy = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        finally:
            raw.close()
        return not busy

    def report_wal(self, found: WalCheck, *, actor: str = "system") -> int:
        """The WAL_GROWING warning event of a stuck log (:meth:`check_wal`)."""
        with self.write() as conn:
            return self._insert_event(
                conn, EventType.WAL_GROWING, found.message, level=Level.WARNING, actor=actor,
                payload={"database": str(found.database), "log_bytes": found.log_bytes,
                         "file_bytes": found.file_bytes, "threshold": found.threshold,
                         "frames": found.frames, "checkpointed": found.checkpointed,
                         "readers": list(found.readers) if found.readers else None,
                         "holder": found.holder})

    # -- retention --------------------------------------------------------------------------

    def _prunable_runs(self, cutoff: datetime, keep_last: int) -> list[tuple[str, str]]:
        """(run id, state) of every run :meth:`prune` would delete at ``cutoff``, job by job:
        finished, ended before ``cutoff``, and not among the job's ``keep_last`` most recent
        finished runs (by creation). Reads only (one snapshot per job)."""
        cutoff = require_aware(cutoff, "cutoff")
        found: list[tuple[str, str]] = []
        with self.read() as conn:
            jobs = [row[0] for row in conn.execute(
                sa.select(runs.c.job_id).where(runs.c.state.in_(_FINISHED)).distinct())]
        for job in jobs:
            query = (
                sa.select(runs.c.id, runs.c.state, runs.c.finished_at, runs.c.created_at)
                .where(runs.c.job_id == job, runs.c.state.in_(_FINISHED))
                .order_by(runs.c.created_at.desc(), runs.c.id.desc())
                .offset(keep_last)
            )
            with self.read() as conn:
                for run_id, state, finished_at, created_at in conn.execute(query):
                    if (finished_at or created_at) < cutoff:
                        found.append((run_id, state))
        return found

    def prune(self, *, days: int, keep_last: int, now: datetime | None = None,
              dry_run: bool = False, batch_size: int = BATCH_SIZE,
              actor: str = "retention") -> PruneReport:
        """Delete old finished runs (with their step runs, logs, checkpoints) and old events.

        See the module doc for the rule. Each batch of at most ``batch_size`` runs or events
        is one transaction; a run's state is checked again in the DELETE, so a run that is
        somehow active is never removed. Unless ``dry_run`` (which only counts) and when
        anything went, writes a RETENTION_PRUNED event with the report as payload.
        """
        if days < 1 or keep_last < 0 or batch_size < 1:
            raise ValueError("prune needs days >= 1, keep_last >= 0 and batch_size >= 1")
        now = require_aware(now or self._now(), "now")
        report = PruneReport(now - timedelta(days=days), days, keep_last, dry_run)
        started = self.clock.monotonic()
        doomed = self._prunable_runs(report.cutoff, keep_last)
        for chunk in _chunks(doomed, batch_size):
            self._prune_runs(chunk, report)
        self._prune_events(report, batch_size)
        if dry_run:  # the doomed runs still exist: count their old events as going too
            self._count_events_of(doomed, report, batch_size)
        report.seconds = self.clock.monotonic() - started
        if not dry_run and (report.runs or report.events):
            report.event_id = self._append_retention_event(report, actor)
        return report

    def _prune_runs(self, chunk: Sequence[tuple[str, str]], report: PruneReport) -> None:
        ids = [run_id for run_id, _ in chunk]
        begun = self.clock.monotonic()
        with (self.read() if report.dry_run else self.write()) as conn:
            counts = [
                int(conn.execute(sa.select(sa.func.count()).select_from(table)
                                 .where(table.c.run_id.in_(ids))).scalar_one())
                for table in (step_runs, run_logs, checkpoints)
            ]
            if report.dry_run:
                states = [state for _, state in chunk]
            else:
                states = [row[0] for row in conn.execute(
                    sa.delete(runs).where(runs.c.id.in_(ids), runs.c.state.in_(_FINISHED))
                    .returning(runs.c.state))]
        report.longest_batch_seconds = max(report.longest_batch_seconds,
                                           self.clock.monotonic() - begun)
        if not report.dry_run:
            self.clock.sleep(BATCH_PAUSE)
        report.batches += 1
        report.runs += len(states)
        for state in states:
            report.runs_by_state[state] = report.runs_by_state.get(state, 0) + 1
        report.step_runs += counts[0]
        report.logs += counts[1]
        report.checkpoints += counts[2]

    def _prune_events(self, report: PruneReport, batch_size: int) -> None:
        """Events older than the cutoff whose run is gone (or that name none), in batches."""
        cutoff = sa.literal(report.cutoff, event_log.c.created_at.type)
        with self.read() as conn:
            last = conn.execute(sa.select(sa.func.max(event_log.c.event_id))
                                .where(event_log.c.created_at < cutoff)).scalar()
        if last is None:
            return
        orphan = sa.or_(event_log.c.run_id.is_(None), ~sa.exists().where(
            runs.c.id == event_log.c.run_id))
        after = 0
        while True:
            begun = self.clock.monotonic()
            pick = (sa.select(event_log.c.event_id)
                    .where(event_log.c.event_id > after, event_log.c.event_id <= last,
                           event_log.c.created_at < cutoff, orphan)
                    .order_by(event_log.c.event_id).limit(batch_size))
            with (self.read() if report.dry_run else self.write()) as conn:
                ids = [row[0] for row in conn.execute(pick)]
                if ids and not report.dry_run:
                    conn.execute(sa.delete(event_log).where(event_log.c.event_id.in_(ids)))
            if not ids:
                return
            report.longest_batch_seconds = max(report.longest_batch_seconds,
                                               self.clock.monotonic() - begun)
            if not report.dry_run:
                self.clock.sleep(BATCH_PAUSE)
            report.batches += 1
            report.events += len(ids)
            after = ids[-1]

    def _count_events_of(self, doomed: Sequence[tuple[str, str]], report: PruneReport,
                         batch_size: int) -> None:
        cutoff = sa.literal(report.cutoff, event_log.c.created_at.type)
        with self.read() as conn:
            for chunk in _chunks(doomed, batch_size):
                report.events += int(conn.execute(
                    sa.select(sa.func.count()).select_from(event_log).where(
                        event_log.c.run_id.in_([run_id for run_id, _ in chunk]),
                        event_log.c.created_at < cutoff)).scalar_one())

    def _append_retention_event(self, report: PruneReport, actor: str) -> int:
        """The RETENTION_PRUNED event: what a prune deleted (its report as payload)."""
        message = (f"retention pruned {report.runs} run(s), {report.step_runs} step run(s), "
                   f"{report.logs} log line(s) and {report.events} event(s) older than "
                   f"{report.days} days (cutoff {report.cutoff.isoformat()}, the last "
                   f"{report.keep_last} finished runs of each job kept)")
        with self.write() as conn:
            return self._insert_event(conn, EventType.RETENTION_PRUNED, message,
                                      payload=report.as_dict(), actor=actor)


def _chunks(items: Sequence[tuple[str, str]], size: int) -> Iterator[Sequence[tuple[str, str]]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
