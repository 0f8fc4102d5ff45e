"""The scheduler's leadership on PostgreSQL: a session-level advisory lock held on a
dedicated connection (see :mod:`cadenza.scheduler.leader`, which chooses it)."""

from __future__ import annotations

import hashlib
import logging

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from cadenza.store.engine import describe_url

log = logging.getLogger("cadenza.scheduler.leader")

ADVISORY_KEY = int.from_bytes(hashlib.sha256(b"cadenza:scheduler").digest()[:8], "big", signed=True)
"""The advisory lock key every Cadenza scheduler of one PostgreSQL database competes for."""


class PostgresLeadership:
    """``pg_try_advisory_lock`` on a dedicated session."""

    def __init__(self, url: sa.URL | str, key: int = ADVISORY_KEY) -> None:
        self.key = key
        self._engine = sa.create_engine(url, poolclass=NullPool)
        self._conn: sa.Connection | None = None

    @property
    def is_leader(self) -> bool:
        return self._conn is not None

    def acquire(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT 1"))
                return True
            except sa.exc.SQLAlchemyError:
                log.warning("scheduler leadership lost: its database session is gone")
                self._drop()
        try:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except sa.exc.SQLAlchemyError as exc:
            log.warning("cannot reach %s to compete for leadership: %s",
                        describe_url(self._engine.url), exc)
            return False
        try:
            won = bool(
                conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar()
            )
        except sa.exc.SQLAlchemyError:
            conn.close()
            return False
        if not won:
            conn.close()
            return False
        self._conn = conn
        log.info("scheduler leadership taken (advisory lock %d)", self.key)
        return True

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
        except sa.exc.SQLAlchemyError:
            pass  # the session ends below, which releases the lock anyway
        self._drop()

    def close(self) -> None:
        """Release and dispose of the dedicated engine."""
        self.release()
        self._engine.dispose()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sa.exc.SQLAlchemyError:
                pass
