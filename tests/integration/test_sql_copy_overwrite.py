"""sql_copy overwrite on PostgreSQL, MariaDB and SQLite targets: another connection reading
the target every 10 ms sees the whole old table or the whole new one, never an empty or a
partial one; a swap that fails leaves the old table live."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_copy_dbs import endpoint, pg_url2  # noqa: F401 (a fixture)
from sql_copy_worker import FileCheckpointContext
from sql_ctx import Db, SqlTestContext, execute, rows, run_step

from cadenza.domain.errors import Fatal
from cadenza.steps.builtin.sql_copy import SqlCopyStep

OLD, NEW = 1_000, 30_000


@pytest.fixture(params=[
    pytest.param(("postgresql", "postgresql"), marks=pytest.mark.postgres, id="pg"),
    pytest.param(("sqlite", "mariadb"), marks=pytest.mark.mariadb, id="mariadb"),
    pytest.param(("postgresql", "sqlite"), marks=pytest.mark.postgres, id="sqlite"),
])
def ends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Db, Db]]:
    src = endpoint(request, request.param[0], tmp_path, "src")
    dst = endpoint(request, request.param[1], tmp_path, "dst")
    yield next(src), next(dst)
    next(dst, None)
    next(src, None)


def prepare(src: Db, dst: Db) -> tuple[str, str]:
    s, t = src.table("os"), dst.table("ot")
    execute(src.url, f"CREATE TABLE {s} (id BIGINT PRIMARY KEY, v VARCHAR(10))")
    execute(dst.url, f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, v VARCHAR(10))")
    engine = sa.create_engine(src.url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {s} VALUES (:id, 'new')"),
                     [{"id": i} for i in range(NEW)])
    engine.dispose()
    engine = sa.create_engine(dst.url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {t} VALUES (:id, 'old')"),
                     [{"id": i} for i in range(OLD)])
    engine.dispose()
    return s, t


class Reader(threading.Thread):
    """Reads the target every 10 ms on its own connection; keeps what each read saw."""

    def __init__(self, url: str, table: str) -> None:
        super().__init__(daemon=True)
        self.engine = sa.create_engine(url, connect_args={"timeout": 30} if url.startswith(
            "sqlite") else {})
        self.sql = f"SELECT count(*), min(v), max(v), count(DISTINCT id) FROM {table}"
        self.seen: list[tuple[Any, ...]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with self.engine.connect() as conn:
                while not self.stop.wait(0.01):
                    self.seen.append(tuple(conn.execute(sa.text(self.sql)).one()))
                    conn.commit()  # the next read takes a fresh snapshot
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            self.engine.dispose()


@pytest.mark.parametrize("resumable", [True, False], ids=["batch-commits", "one-transaction"])
def test_readers_see_the_whole_old_or_the_whole_new_table(
        ends: tuple[Db, Db], tmp_path: Path, resumable: bool) -> None:
    src, dst = ends
    s, t = prepare(src, dst)
    reader = Reader(dst.url, t)
    connections = {"src": src.url, "dst": dst.url}
    ctx = (FileCheckpointContext(tmp_path, connections, tmp_path / "cp.json") if resumable
           else SqlTestContext(tmp_path, connections, step_type="sql_copy"))
    reader.start()
    try:
        while len(reader.seen) < 3 and not reader.errors:  # reads before the copy
            threading.Event().wait(0.01)
        result = run_step(SqlCopyStep, ctx, source={"connection": "src", "table": s},
                          target={"connection": "dst", "table": t}, batch_size=1_000)
        during = len(reader.seen)
        while len(reader.seen) < during + 3 and not reader.errors:  # reads after the swap
            threading.Event().wait(0.01)
    finally:
        reader.stop.set()
        reader.join(timeout=60)
        ctx.close()
    assert not reader.errors, reader.errors
    assert result.output["batches"] == NEW // 1_000
    old, new = (OLD, "old", "old", OLD), (NEW, "new", "new", NEW)
    assert set(reader.seen) <= {old, new}, set(reader.seen) - {old, new}
    assert reader.seen[0] == old and reader.seen[-1] == new
    flips = sum(1 for a, b in zip(reader.seen, reader.seen[1:], strict=False) if a != b)
    assert flips == 1  # never back to the old table
    assert len(reader.seen) > 6
    assert f"swapping {t}__new into {t}" in ctx.log_record.text("INFO")


def test_a_failing_swap_leaves_the_old_table_live(ends: tuple[Db, Db], tmp_path: Path) -> None:
    """A real failure where the database gives one: on PostgreSQL a view on the live table
    (the DROP in the swap is refused), on MariaDB a view named ``<t>__old`` (the RENAME is
    refused); SQLite refuses neither, so there the swap's RENAME is made to fail by a hook
    on the engine (a stand-in: nothing real makes it fail)."""
    src, dst = ends
    s, t = prepare(src, dst)
    ctx = FileCheckpointContext(tmp_path, {"src": src.url, "dst": dst.url}, tmp_path / "c.json")
    if dst.kind == "postgresql":
        execute(dst.url, f"CREATE VIEW {t}_v AS SELECT * FROM {t}")
        expected = "cannot drop table"
    elif dst.kind == "mariadb":
        execute(dst.url, f"CREATE VIEW {t}__old AS SELECT 1 AS x")
        expected = "already exists"
    else:
        def fail(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if "RENAME TO" in statement:
                raise sa.exc.OperationalError(statement, (), Exception("disk I/O error"))
        sa.event.listen(ctx.sql_engine("dst"), "before_cursor_execute", fail)
        expected = "disk I/O error"
    try:
        with pytest.raises(Fatal, match=expected):
            run_step(SqlCopyStep, ctx, source={"connection": "src", "table": s},
                     target={"connection": "dst", "table": t}, batch_size=5_000)
    finally:
        ctx.close()
        if dst.kind == "mariadb":
            execute(dst.url, f"DROP VIEW IF EXISTS {t}__old")
    assert rows(dst.url, f"SELECT count(*), min(v), max(v) FROM {t}") == [(OLD, "old", "old")]
    engine = sa.create_engine(dst.url)
    try:
        names = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert f"{t}__new" not in names  # dropped: the copy failed for good
