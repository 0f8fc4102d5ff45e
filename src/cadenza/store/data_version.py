"""Whether anything was committed to a SQLite file since a last look, for the loops of an
idle node that would otherwise read the store on a timer.

SQLite changes a connection's ``PRAGMA data_version`` at every commit of any *other*
connection, of this process or another. A :class:`DataVersion` reads it on a connection of
its own, which never writes, so every commit of the store is seen. A loop reads the token
*before* its look at the store and keeps the token of a look that found nothing to do:
while the token stays the same, nothing was committed since, and the look would find the
same nothing. The token is None where the store cannot tell (PostgreSQL, an in-memory
database, a file that cannot be opened): then every look is made.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


class DataVersion:
    """The ``data_version`` of one SQLite file, read on a private connection."""

    def __init__(self, path: Path | None) -> None:
        self._conn: sqlite3.Connection | None = None
        if path is not None:
            try:
                self._conn = sqlite3.connect(path, isolation_level=None,
                                             check_same_thread=False)
            except sqlite3.Error:  # then every look is made
                self._conn = None

    def token(self) -> int | None:
        """The number now (it differs after any other connection's commit), or None when
        unknown (then look)."""
        if self._conn is None:
            return None
        try:
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:  # the look says what is wrong, if anything
            return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
