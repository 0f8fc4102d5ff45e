"""sql_copy between SQLite files: cancel and timeout (driven by a FakeClock) roll back and
leave nothing; a finished copy is not copied again; the source's types decide the target's;
a query source is bound, never spliced; a stale attempt is refused at its next commit."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from sql_ctx import SqlTestContext, execute, rows, run_step, scalar

from cadenza.clock import FakeClock
from cadenza.domain.errors import Fatal, Retryable
from cadenza.steps.builtin.lib import copying, sqltypes
from cadenza.steps.builtin.sql_copy import SqlCopyStep
from cadenza.steps.registry import registry

N = 20_000


class CheckpointContext(SqlTestContext):
    """The test ctx plus ctx.checkpoint / ctx.last_checkpoint (the executor keeps them in the
    store; see tests/integration/test_checkpoint_ctx.py)."""

    saved: Any = None

    def checkpoint(self, state: Any) -> None:
        self.saved = state

    @property
    def last_checkpoint(self) -> Any:
        return self.saved


@pytest.fixture
def urls(tmp_path: Path) -> tuple[str, str]:
    src = f"sqlite:///{(tmp_path / 'src.db').as_posix()}"
    dst = f"sqlite:///{(tmp_path / 'dst.db').as_posix()}"
    execute(src, "CREATE TABLE s (id INTEGER PRIMARY KEY, v TEXT, d DATE, ok BOOLEAN)",
            f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {N}) "
            "INSERT INTO s SELECT i, 'v' || i, '2026-01-02', i % 2 FROM g")
    return src, dst


@pytest.fixture
def ctx(tmp_path: Path, urls: tuple[str, str]) -> Iterator[SqlTestContext]:
    c = SqlTestContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy")
    yield c
    c.close()


def copy(ctx: SqlTestContext, table: str = "t", **fields: Any) -> Any:
    fields.setdefault("source", {"connection": "src", "table": "s"})
    return run_step(SqlCopyStep, ctx, target={"connection": "dst", "table": table}, **fields)


def tables(url: str) -> list[str]:
    return [r[0] for r in rows(url, "SELECT name FROM sqlite_master WHERE type = 'table' "
                                    "AND name NOT LIKE 'cadenza_%' ORDER BY name")]


def test_registered() -> None:
    assert registry()["sql_copy"] is SqlCopyStep


@pytest.mark.reliability_case(25)
def test_creates_the_target_with_the_source_types(ctx: SqlTestContext,
                                                  urls: tuple[str, str]) -> None:
    result = copy(ctx, batch_size=7_000)
    assert result.rows == N
    assert {k: result.output[k] for k in ("source_rows", "target_rows", "batches", "table",
                                          "mode")} == {
        "source_rows": N, "target_rows": N, "batches": 3, "table": "t", "mode": "overwrite"}
    assert isinstance(result.output["elapsed"], float)
    declared = rows(urls[1], "SELECT name, type FROM pragma_table_info('t')")
    assert declared == [("id", "INTEGER"), ("v", "TEXT"), ("d", "DATE"), ("ok", "BOOLEAN")]
    assert rows(urls[1], "SELECT * FROM t WHERE id IN (1, 2) ORDER BY id") == [
        (1, "v1", "2026-01-02", 1), (2, "v2", "2026-01-02", 0)]
    info = ctx.log_record.text("INFO")
    assert "batch 3: 6000 rows (20000 in all) into t" in info
    assert "swapping t__new into t (20000 rows)" in info


@pytest.mark.reliability_case(16)
def test_a_query_source_binds_its_tokens(tmp_path: Path, urls: tuple[str, str]) -> None:
    hostile = "1 OR 1=1; DROP TABLE s"
    ctx = SqlTestContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy",
                         params={"from": 19_990, "bad": hostile})
    try:
        result = copy(ctx, source={"connection": "src", "query":
                                   "SELECT id, v FROM s WHERE id > ${params.from} "
                                   "OR v = ${params.bad} ORDER BY id;"}, mode="append")
        assert result.output["source_rows"] == 10
        with pytest.raises(Fatal, match="inside a quoted string"):
            copy(ctx, source={"connection": "src", "query": "SELECT * FROM s WHERE v = "
                                                           "'${params.bad}'"})
    finally:
        ctx.close()
    assert scalar(urls[0], "SELECT count(*) FROM s") == N
    assert rows(urls[1], "SELECT min(id), max(id) FROM t") == [(19_991, N)]


@pytest.mark.reliability_case(24)
def test_cancel_and_timeout_roll_back(tmp_path: Path, urls: tuple[str, str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The test decides when the cancel and the timeout strike: once the first batch was
    written, whatever the machine's speed; the step fails and leaves nothing behind."""
    clock = FakeClock()
    ctx = SqlTestContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy",
                         timeout=60, clock=clock)
    written: list[int] = []
    strike: list[Any] = [lambda: None]
    real_write = copying.Writer.write

    def write(self: Any, batch: Any) -> None:
        real_write(self, batch)
        written.append(len(batch))
        if len(written) == 1:
            strike[0]()

    monkeypatch.setattr(copying.Writer, "write", write)
    try:
        for mode in ("overwrite", "append"):
            ctx.cancel = False
            written.clear()
            strike[0] = lambda: setattr(ctx, "cancel", True)
            with pytest.raises(Fatal, match="step canceled"):
                copy(ctx, mode=mode, batch_size=1_000)
            assert written == [1_000]
            assert tables(urls[1]) == []

        ctx.cancel = False
        written.clear()
        strike[0] = lambda: clock.advance(61)  # the step's 60 s are up, mid-copy
        with pytest.raises(Retryable, match="step timeout"):
            copy(ctx, batch_size=1_000)
        assert written == [1_000] and tables(urls[1]) == []

        written.clear()
        strike[0] = lambda: None  # untouched, the same copy goes through: the strikes did it
        ctx.set_remaining(60)
        assert copy(ctx, batch_size=1_000).rows == N and len(written) == N // 1_000
    finally:
        ctx.close()


@pytest.mark.reliability_case(26)
def test_a_finished_copy_is_not_copied_again(tmp_path: Path, urls: tuple[str, str]) -> None:
    """The worker died after the last commit, before the step's end was recorded."""
    ctx = CheckpointContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy")
    try:
        first = copy(ctx, mode="append", batch_size=5_000)
        again = copy(ctx, mode="append", batch_size=5_000)
        assert again.output == first.output
        assert scalar(urls[1], "SELECT count(*) FROM t") == N
        assert "copied by an earlier attempt of this step" in ctx.log_record.text()
        ctx.saved = None  # a new run of the job: a new copy
        copy(ctx, mode="append", batch_size=5_000)
        assert scalar(urls[1], "SELECT count(*) FROM t") == 2 * N
    finally:
        ctx.close()


@pytest.mark.reliability_case(26)
def test_a_stale_attempt_is_refused(tmp_path: Path, urls: tuple[str, str]) -> None:
    """Attempt 1 stops between two batches (a hung worker whose lease ran out); attempt 2
    takes the copy over and finishes; attempt 1's next commit is refused and rolled back.
    (SQLite has one writer, so attempt 2 runs only once attempt 1 committed its batch:
    the check comes right after that commit.)"""
    first = CheckpointContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy")
    second = CheckpointContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy")
    real = copying.Progress.commit
    calls = [0]

    def commit(self: copying.Progress) -> None:
        real(self)
        if self.ctx is first:
            calls[0] += 1
            if calls[0] == 3:  # table made, two batches committed; the lock is free
                self.conn.rollback()
                second.saved = first.saved
                assert copy(second, mode="append", batch_size=5_000).rows == N
                self.conn.exec_driver_sql("BEGIN IMMEDIATE")

    copying.Progress.commit = commit  # type: ignore[method-assign]
    try:
        with pytest.raises(Retryable, match="another attempt of this step took the copy over"):
            copy(first, mode="append", batch_size=5_000)
    finally:
        copying.Progress.commit = real  # type: ignore[method-assign]
        first.close()
        second.close()
    assert scalar(urls[1], "SELECT count(*) FROM t") == N
    assert scalar(urls[1], "SELECT count(DISTINCT id) FROM t") == N


@pytest.mark.parametrize(("value", "expected"), [
    (126032, date(2026, 2, 1)), (99365, date(1999, 12, 31)), (100060, date(2000, 2, 29)),
    (124366, date(2024, 12, 31)), (0, None), (None, None)])
def test_julian_dates(value: Any, expected: date | None) -> None:
    assert sqltypes.julian(value, "x") == expected


@pytest.mark.parametrize("value", [125366, 126000, -1, "abc"])
def test_bad_julian_dates(value: Any) -> None:
    with pytest.raises(Fatal, match="column 'x'"):
        sqltypes.julian(value, "x")


def test_a_sqlite_query_keeps_the_declared_types(tmp_path: Path,
                                                 urls: tuple[str, str]) -> None:
    """SQLite declares no types for a query's columns; a column taken straight from a
    table keeps its table's declared type (read through a temporary view), an expression
    is typed by its values."""
    execute(urls[0], "CREATE TABLE m (id INTEGER, amount NUMERIC(15,4), at TIMESTAMP)",
            "INSERT INTO m VALUES (1, 12.5, '2026-01-02 03:04:05')")
    ctx = SqlTestContext(tmp_path, {"src": urls[0], "dst": urls[1]}, step_type="sql_copy",
                         params={"one": 1})
    try:
        copy(ctx, "q", source={"connection": "src", "query":
                               "SELECT id, amount, at, id * 2 AS twice, 'x' || id AS label "
                               "FROM m WHERE id = ${params.one}"})
    finally:
        ctx.close()
    declared = rows(urls[1], "SELECT name, type FROM pragma_table_info('q')")
    assert declared == [("id", "INTEGER"), ("amount", "DECIMAL_TEXT(15,4)"),
                        ("at", "TIMESTAMP"), ("twice", "INTEGER"), ("label", "TEXT")]
