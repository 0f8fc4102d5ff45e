"""The write-ahead log of a SQLite file store, copied into the database off the writer's path.

A SQLite store in WAL mode appends every commit's pages to the ``-wal`` file; a
*checkpoint* copies them into the database file. By default SQLite checkpoints inside
the commit that finds the log past ``wal_autocheckpoint`` pages (1,000): a node's
dispatcher, which makes most of a busy node's commits, then spends about a tenth of its
time copying pages and syncing files instead of claiming and ending runs
(docs/benchmarks.md, "What a feature costs").

:class:`WalCheckpointer` moves that work to a thread of its own. Every
:data:`CHECKPOINT_COMMITS` commits, the writer wakes it (one counter and, now and then,
one ``Event.set``) and it runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a pooled
connection: PASSIVE waits for nobody (no reader, no writer) and copies the pages that no
reader still needs. SQLite does that copy without the interpreter's lock, so it runs on
the other core while the writer goes on.

What stays as it was:

* ``wal_autocheckpoint`` is left at SQLite's default on every connection. The commit
  that finds the log past it still checkpoints, which now finds most pages already
  copied and is short. It is also the only thing that lets SQLite start the log over
  from its beginning (a checkpoint done while commits keep coming never catches up with
  the last one), so the ``-wal`` file stays as small as before.
* Durability: a checkpoint only copies pages that are already committed in the log.
* Nothing runs while nothing is written: the thread starts at the store's first
  :data:`CHECKPOINT_COMMITS` commits and then sleeps until woken, so an idle node and a
  command that only reads have no such thread busy.

A checkpoint that fails (the disk is full, the file went away) is logged once, as a
WARNING, until one succeeds again; the writers never see it, and the commits that pass
``wal_autocheckpoint`` checkpoint on their own as before. The store's WAL check
(:meth:`~cadenza.store.maintenance.MaintenanceRepository.check_wal`) reports a log that
keeps growing.
"""

from __future__ import annotations

import logging
import threading

import sqlalchemy as sa

log = logging.getLogger("cadenza.store")

CHECKPOINT_COMMITS = 16
"""Commits between two background checkpoints: often enough that the commit which passes
``wal_autocheckpoint`` finds little left to copy (a busy node's commit writes about 60
pages of log), seldom enough that each checkpoint (two file syncs when it copies anything)
has pages to copy. Measured against 4, 8 and 32 (docs/benchmarks.md)."""
STOP_SECONDS = 5.0
"""How long :meth:`WalCheckpointer.close` waits for a checkpoint in progress."""


class WalCheckpointer:
    """Checkpoints a SQLite file store's WAL on a thread of its own (see the module doc).

    :meth:`committed` is called by the store's writer after each commit; :meth:`close`
    stops the thread. ``attempts`` counts the checkpoints tried, ``checkpoints`` those
    done, ``failures`` those that raised."""

    def __init__(self, engine: sa.Engine, every: int = CHECKPOINT_COMMITS) -> None:
        self.engine = engine
        self.database = engine.url.database
        """The database file, named in the log."""
        self.every = every
        self.checkpoints = 0
        self.failures = 0
        self.attempts = 0
        self._commits = 0
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._ran = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failing = False

    def committed(self) -> None:
        """One commit more (the writing thread, once its commit is done): wakes the thread
        every :attr:`every` commits, starting it the first time. Two writers counting at
        once may lose a count: a checkpoint comes a commit later."""
        self._commits += 1
        if self._commits < self.every:
            return
        self._commits = 0
        if self._thread is None:
            with self._lock:
                if self._closed or self._thread is not None:
                    return
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="cadenza-wal-checkpoint")
                self._thread.start()
        self._wake.set()

    def wait_for(self, attempts: int, timeout: float) -> bool:
        """Block until at least ``attempts`` checkpoints were tried (or ``timeout`` seconds
        of real time passed: a thread's progress, not a schedule); whether they were."""
        with self._ran:
            return self._ran.wait_for(lambda: self.attempts >= attempts, timeout)

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress, if any)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_SECONDS)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            self._checkpoint()

    def _checkpoint(self) -> None:
        try:
            raw = self.engine.raw_connection()
            try:
                cursor = raw.cursor()
                try:
                    cursor.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                finally:
                    cursor.close()
            finally:
                raw.close()
        except Exception as exc:  # the writers never see it: see the module doc
            with self._ran:
                first = not self._failing
                self._failing = True
            if first:  # said before the attempt is counted: whoever waits for it sees it
                log.warning("the store's log could not be copied into its database file %s "
                            "in the background (%s: %s); commits copy it themselves meanwhile",
                            self.database, type(exc).__name__, exc)
            with self._ran:
                self.attempts += 1
                self.failures += 1
                self._ran.notify_all()
            return
        with self._ran:
            recovered = self._failing
            self._failing = False
        if recovered:
            log.info("the store's log is copied into its database file in the background "
                     "again")
        with self._ran:
            self.attempts += 1
            self.checkpoints += 1
            self._ran.notify_all()
