"""sql_copy killed with kill -9 mid-copy (a real child process), then resumed: every row
lands once; an overwrite's live table stays the old one until the resumed copy swaps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from sql_copy_dbs import endpoint, pg_url2  # noqa: F401 (a fixture)
from sql_copy_worker import FileCheckpointContext
from sql_ctx import Db, execute, rows, run_step, scalar

from cadenza.steps.builtin.sql_copy import SqlCopyStep

pytestmark = pytest.mark.slow  # a worker process per test, up to 300,000 rows

WORKER = Path(__file__).parent / "sql_copy_worker.py"
SRC = Path(__file__).parents[2] / "src"


@pytest.fixture(params=[
    pytest.param(("postgresql", "postgresql", 300_000), marks=pytest.mark.postgres, id="pg-pg"),
    pytest.param(("sqlite", "mariadb", 40_000), marks=pytest.mark.mariadb, id="sqlite-mariadb"),
    pytest.param(("postgresql", "sqlite", 60_000), marks=pytest.mark.postgres, id="pg-sqlite"),
])
def ends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Db, Db, int]]:
    src_kind, dst_kind, n = request.param
    src = endpoint(request, src_kind, tmp_path, "src")
    dst = endpoint(request, dst_kind, tmp_path, "dst")
    yield next(src), next(dst), n
    next(dst, None)
    next(src, None)


def make_source(db: Db, n: int) -> str:
    s = db.table("rs")
    if db.kind == "postgresql":
        execute(db.url, f"CREATE TABLE {s} (id BIGINT PRIMARY KEY, v TEXT)",
                f"INSERT INTO {s} SELECT g, 'row ' || g FROM generate_series(1, {n}) g")
    else:
        execute(db.url, f"CREATE TABLE {s} (id INTEGER PRIMARY KEY, v TEXT)",
                f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {n}) "
                f"INSERT INTO {s} SELECT i, 'row ' || i FROM g")
    return s


def progress_rows(url: str) -> int:
    try:
        return int(scalar(url, "SELECT coalesce(max(rows_done), 0) FROM cadenza_load_progress")
                   or 0)
    except Exception:  # the table is not there yet (the worker is starting)
        return 0


def kill_mid_copy(args: list[str], dst_url: str, n: int, batch: int) -> None:
    """Start the worker; kill -9 it once a few batches are committed, before the end."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = subprocess.Popen([sys.executable, str(WORKER), *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pause = threading.Event()
    try:
        while child.poll() is None and progress_rows(dst_url) < 3 * batch:
            pause.wait(0.01)
        child.kill()  # SIGKILL on POSIX, TerminateProcess on Windows
    finally:
        out, err = child.communicate(timeout=60)
    assert child.returncode != 0, f"the worker finished before the kill: {out!r} {err!r}"
    done = progress_rows(dst_url)
    assert 3 * batch <= done < n, done


@pytest.mark.parametrize("mode", ["overwrite", "append"])
@pytest.mark.reliability_case(26)
def test_killed_then_resumed_every_row_once(ends: tuple[Db, Db, int], tmp_path: Path,
                                            mode: str) -> None:
    src, dst, n = ends
    s, t = make_source(src, n), dst.table("rt")
    execute(dst.url, f"CREATE TABLE {t} (id BIGINT, v TEXT)", f"INSERT INTO {t} VALUES (-1, 'old')")
    batch = n // 60
    saved = tmp_path / "checkpoint.json"
    kill_mid_copy([str(tmp_path), str(saved), src.url, dst.url, s, t, mode, str(batch)],
                  dst.url, n, batch)
    if mode == "overwrite":  # readers still see the whole old table
        assert rows(dst.url, f"SELECT * FROM {t}") == [(-1, "old")]
    else:
        assert 3 * batch < scalar(dst.url, f"SELECT count(*) FROM {t}") < n + 1
    ctx = FileCheckpointContext(tmp_path, {"src": src.url, "dst": dst.url}, saved)
    try:
        result = run_step(SqlCopyStep, ctx, source={"connection": "src", "table": s},
                          target={"connection": "dst", "table": t}, mode=mode,
                          batch_size=batch)
    finally:
        ctx.close()
    assert "resuming the copy" in ctx.log_record.text("INFO")
    extra = 1 if mode == "append" else 0  # the old row stays in an append
    assert result.output["source_rows"] == n
    assert scalar(dst.url, f"SELECT count(*) FROM {t}") == n + extra
    assert scalar(dst.url, f"SELECT count(DISTINCT id) FROM {t}") == n + extra
    assert scalar(dst.url, f"SELECT min(id) FROM {t}") == (-1 if extra else 1)
    assert scalar(dst.url, f"SELECT max(id) FROM {t}") == n
    assert rows(dst.url, f"SELECT v FROM {t} WHERE id = {n // 2}") == [(f"row {n // 2}",)]
    assert json.loads(saved.read_text())["table"] == t
