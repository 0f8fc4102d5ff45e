"""What the benchmarks share: a scratch PostgreSQL database, created and dropped; the log
lines of ``cadenza serve``."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def scratch_pg_database(admin_url: str = PG_ADMIN, *, keep: bool = False) -> Iterator[str]:
    """A fresh, empty PostgreSQL database's URL; the database is dropped afterwards (unless
    ``keep``: then its name is printed to stderr, to inspect it; drop it yourself)."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"cadenza_bench_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        if keep:
            print(f"kept database {name}", file=sys.stderr)
        else:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@contextmanager
def serve_logging(redactor: Any, path: Path, *, enabled: bool = True) -> Iterator[None]:
    """Log as ``cadenza serve`` does while the block runs: the ``cadenza`` logger at INFO
    through serve's own handler, into ``path`` (as ``cadenza serve 2> path``). A node
    measured without it skips the formatting and redaction of every line it logs."""
    from cadenza.clock import SystemClock
    from cadenza.server import RedactingFormatter

    if not enabled:
        yield
        return
    root = logging.getLogger("cadenza")
    level = root.level
    with path.open("w", encoding="utf-8") as stream:
        try:
            from cadenza.server import log_handler
            handler = log_handler(redactor, SystemClock(), stream)
        except ImportError:  # the code of an A/B's base, before serve's handler had a name
            handler = logging.StreamHandler(stream)
            handler.setFormatter(RedactingFormatter(
                redactor, "%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield
        finally:
            root.removeHandler(handler)
            root.setLevel(level)
