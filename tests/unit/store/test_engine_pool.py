"""The store's connection pools keep as many connections as a served node uses at once
(W6: with SQLAlchemy's 5, every other API request under 10 clients opened a connection)."""

from __future__ import annotations

from pathlib import Path

from cadenza.store.engine import POSTGRESQL_POOL, SQLITE_POOL, create_engine


def test_a_sqlite_file_keeps_its_connections(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{(tmp_path / 'cadenza.db').as_posix()}")
    try:
        assert (engine.pool.size(), engine.pool._max_overflow) == SQLITE_POOL  # type: ignore[attr-defined]
        assert SQLITE_POOL[0] >= 16
    finally:
        engine.dispose()


def test_postgresql_keeps_its_connections() -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connects
    try:
        assert (engine.pool.size(), engine.pool._max_overflow) == POSTGRESQL_POOL  # type: ignore[attr-defined]
        assert sum(POSTGRESQL_POOL) <= 20
    finally:
        engine.dispose()
