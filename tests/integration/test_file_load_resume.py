"""file_load per-batch checkpoints on SQLite, PostgreSQL and MariaDB: an attempt that dies
after some commits is resumed by the next one, which neither skips nor doubles rows; the
overwrite swap stays atomic across attempts; a finished load is not loaded again; a stale
attempt is fenced out; a load that fails for good leaves no ``__new`` table."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_ctx import Db, SqlTestContext, database, execute, rows, run_step, scalar

from cadenza.domain.errors import Fatal, Retryable
from cadenza.steps.builtin import file_load
from cadenza.steps.builtin.file_load import FileLoadStep
from cadenza.steps.builtin.lib import sqlutil

N = 25_000


class Crash(BaseException):
    """The worker died (kill -9): nothing after this point runs, nothing is rolled forward."""


class CheckpointContext(SqlTestContext):
    """The test ctx plus ctx.checkpoint / ctx.last_checkpoint kept across attempts (the
    executor keeps them in the store; see tests/integration/test_checkpoint_ctx.py)."""

    saved: Any = None

    def checkpoint(self, state: Any) -> None:
        self.saved = state

    @property
    def last_checkpoint(self) -> Any:
        return self.saved


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    else:
        url = str(request.getfixturevalue("pg_url" if request.param == "postgresql"
                                          else "mariadb_url"))
    made = database(request.param, url)
    db = next(made)
    yield db
    if request.param == "mariadb":
        execute(url, "DROP TABLE IF EXISTS cadenza_load_progress")
    next(made, None)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "files"
    root.mkdir(parents=True)
    (root / "a.csv").write_text("id,v\n" + "".join(f"{i},a{i}\n" for i in range(N)))
    (root / "b.csv").write_text("id,v\n" + "".join(f"{i},b{i}\n" for i in range(N, 2 * N)))
    return root


@pytest.fixture
def ctx(tmp_path: Path, db: Db, files: Path) -> Iterator[CheckpointContext]:
    c = CheckpointContext(tmp_path, {"w": db.url}, step_type="file_load")
    yield c
    c.close()


@pytest.fixture
def crash_after(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``crash_after(k)``: the k-th commit of a load happens, then the worker dies."""
    real = sqlutil.recommit
    count = [0, 0]

    def arm(k: int) -> None:
        count[0], count[1] = 0, k

    def recommit(conn: sa.Connection, guard: Any, ctx: Any) -> None:
        real(conn, guard, ctx)
        count[0] += 1
        if count[1] and count[0] == count[1]:
            count[1] = 0
            raise Crash()

    monkeypatch.setattr(sqlutil, "recommit", recommit)
    return arm


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit every 4,000 rows (50,000 in production) so that 50,000 rows make 14 commits."""
    monkeypatch.setattr(file_load, "COMMIT_ROWS", 4_000)


def load(ctx: SqlTestContext, table: str, **fields: Any) -> Any:
    return run_step(FileLoadStep, ctx, path="*.csv", connection="w", table=table, **fields)


def table_names(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def each_once(url: str, table: str) -> None:
    assert scalar(url, f"SELECT count(*) FROM {table}") == 2 * N
    assert scalar(url, f"SELECT count(DISTINCT id) FROM {table}") == 2 * N
    assert scalar(url, f"SELECT min(id) FROM {table}") == 0
    assert scalar(url, f"SELECT max(id) FROM {table}") == 2 * N - 1


@pytest.mark.parametrize("crash_at", [1, 5, 7, 13])
@pytest.mark.reliability_case(26)
def test_a_resumed_append_neither_skips_nor_doubles(ctx: CheckpointContext, db: Db,
                                                    crash_after: Any, crash_at: int) -> None:
    t = db.table()
    crash_after(crash_at)
    with pytest.raises(Crash):
        load(ctx, t, mode="append")
    committed = scalar(db.url, f"SELECT count(*) FROM {t}") if crash_at > 1 else 0
    assert 0 <= committed < 2 * N  # the crash landed mid-load
    result = load(ctx, t, mode="append")
    assert result.rows == 2 * N
    assert result.output["files"] == ["a.csv", "b.csv"]
    each_once(db.url, t)
    assert "resuming after" in ctx.log_record.text() or crash_at == 1


def test_a_finished_load_is_not_loaded_again(ctx: CheckpointContext, db: Db,
                                             crash_after: Any) -> None:
    """The crash came after the last commit, before the step's end was recorded."""
    t = db.table()
    first = load(ctx, t, mode="append", skip_if_loaded=False)
    again = load(ctx, t, mode="append", skip_if_loaded=False)
    assert again.rows == first.rows == 2 * N
    each_once(db.url, t)
    assert "loaded by an earlier attempt of this step" in ctx.log_record.text()
    ctx.saved = None  # a new run of the job: a new load
    assert load(ctx, t, mode="append", skip_if_loaded=False).rows == 2 * N
    assert scalar(db.url, f"SELECT count(*) FROM {t}") == 4 * N


def test_a_resumed_overwrite_swaps_once_at_the_end(ctx: CheckpointContext, db: Db,
                                                   crash_after: Any) -> None:
    t = db.table()
    execute(db.url, f"CREATE TABLE {t} (id INTEGER, v VARCHAR(20))",
            f"INSERT INTO {t} VALUES (-1, 'old')")
    crash_after(6)
    with pytest.raises(Crash):
        load(ctx, t, mode="overwrite")
    assert rows(db.url, f"SELECT * FROM {t}") == [(-1, "old")]  # readers: the old table
    assert 0 < scalar(db.url, f"SELECT count(*) FROM {t}__new") < 2 * N
    assert load(ctx, t, mode="overwrite").rows == 2 * N
    each_once(db.url, t)
    assert not {f"{t}__new", f"{t}__old"} & table_names(db.url)


def test_a_stale_attempt_is_fenced_out(ctx: CheckpointContext, db: Db, tmp_path: Path,
                                       crash_after: Any) -> None:
    """Attempt 1 hangs (lease lost); attempt 2 takes the load over; attempt 1 wakes up:
    its next commit is refused and rolled back."""
    if db.kind == "sqlite":
        pytest.skip("SQLite has one writer: a hung attempt inside its transaction holds the "
                    "write lock, so the other cannot take over until it is gone")
    t = db.table()
    crash_after(3)
    with pytest.raises(Crash):
        load(ctx, t, mode="append")
    other = CheckpointContext(tmp_path, {"w": db.url}, step_type="file_load")
    other.saved = ctx.saved
    try:
        calls = [0]

        def takeover() -> bool:
            """Attempt 2 runs to its end while attempt 1 is "stopped" between two batches
            (its 2nd check in this thread: after it took the load over and committed; the
            SQL watcher thread's checks do not count)."""
            if threading.current_thread() is threading.main_thread():
                calls[0] += 1
                if calls[0] == 2:
                    assert load(other, t, mode="append").rows == 2 * N
            return False

        ctx.cancel = takeover
        with pytest.raises(Retryable, match="another attempt of this step took the load over"):
            load(ctx, t, mode="append")
    finally:
        other.close()
    each_once(db.url, t)


def test_a_load_that_fails_for_good_cleans_up(ctx: CheckpointContext, db: Db,
                                              files: Path) -> None:
    t = db.table()
    execute(db.url, f"CREATE TABLE {t} (id INTEGER, v VARCHAR(20))",
            f"INSERT INTO {t} VALUES (-1, 'old')")
    (files / "c.csv").write_text("id,v\n" + "".join(f"{i},ok\n" for i in range(9_000))
                                 + '1,"broken\n')
    with pytest.raises(Fatal, match=r"c\.csv: line 9002"):
        load(ctx, t, mode="overwrite")
    assert rows(db.url, f"SELECT * FROM {t}") == [(-1, "old")]
    assert f"{t}__new" not in table_names(db.url)
    assert scalar(db.url, "SELECT count(*) FROM cadenza_load_progress WHERE table_name = "
                          ":t", t=t) == 0
