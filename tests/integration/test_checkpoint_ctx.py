"""ctx.checkpoint / ctx.last_checkpoint and ctx.once on a real store (SQLite and PostgreSQL),
fenced on the run's lease epoch, with ``connection=`` on a real SQLite or PostgreSQL target."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from cadenza.config.schema_settings import Settings
from cadenza.domain.errors import Fatal
from cadenza.domain.params import Scope
from cadenza.executor.connections import Connections
from cadenza.executor.context import ExecutionContext, FencedOut, bind_run
from cadenza.executor.runlog import RunLog
from cadenza.steps.runtime import RunInfo, StepInfo
from cadenza.store import Store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as s:
        yield s


@pytest.fixture(autouse=True)
def _close_homes() -> Iterator[None]:
    yield
    while MADE:
        MADE.pop().connections.close()


def claim(store: Store, job: str = "job") -> tuple[str, int]:
    """A run of ``job``, RUNNING, bound in this process at its epoch."""
    run_id = store.create_run(job, "manual")
    assert run_id is not None
    [run] = store.claim_runs("test-node", datetime.now(UTC) + timedelta(minutes=5),
                             run_ids=[run_id])
    bind_run(run.id, store, run.lease_epoch)
    return run.id, run.lease_epoch


def steal(store: Store, run_id: str) -> None:
    """Another holder took the run over: its epoch moves on."""
    with store.write() as conn:
        conn.execute(sa.text("UPDATE runs SET lease_epoch = lease_epoch + 1 WHERE id = :id"),
                     {"id": run_id})


MADE: list[Home] = []


class Home:
    """A context factory over a home with optional sql connections."""

    def __init__(self, tmp_path: Path, connections: dict[str, str] | None = None) -> None:
        self.home = tmp_path
        self.settings = Settings.model_validate({"connections": {
            n: {"type": "sql", "url": u} for n, u in (connections or {}).items()}})
        self.connections = Connections(tmp_path, self.settings)
        self.log = RunLog("DEBUG", lambda: datetime.now(UTC))
        MADE.append(self)

    def ctx(self, run_id: str, step: str = "work", job: str = "job") -> ExecutionContext:
        run = RunInfo(run_id, job, "manual", None, "DEBUG")
        return ExecutionContext(
            params={}, run=run, step=StepInfo(step, "python", 1, 60.0),
            log=self.log.logger(step), home=self.home, settings=self.settings,
            scope=Scope(run_id=run_id, job_id=job), connections=self.connections,
            events=lambda event: None)

    def lines(self) -> str:
        lines, _ = self.log.take()
        return "\n".join(line.message for line in lines)


def test_last_checkpoint_is_what_an_earlier_attempt_saved(store: Store, tmp_path: Path) -> None:
    home = Home(tmp_path)
    run_id, _ = claim(store)
    first = home.ctx(run_id)
    assert first.last_checkpoint is None
    first.checkpoint({"next": 3, "seen": ["a", "b"]})
    first.checkpoint({"next": 4, "seen": ["a", "b", "c"]})
    assert first.last_checkpoint == {"next": 4, "seen": ["a", "b", "c"]}
    again = home.ctx(run_id)  # the next attempt, after a crash or a retry
    assert again.last_checkpoint == {"next": 4, "seen": ["a", "b", "c"]}
    assert home.ctx(run_id, step="other").last_checkpoint is None
    other_run, _ = claim(store)
    assert home.ctx(other_run).last_checkpoint is None


def test_checkpoint_refuses_what_is_not_json_or_too_big(store: Store, tmp_path: Path) -> None:
    ctx = Home(tmp_path).ctx(claim(store)[0])
    with pytest.raises(Fatal, match=r"step 'work': ctx.checkpoint\(state\).*not JSON-able"):
        ctx.checkpoint({"when": datetime.now(UTC)})
    with pytest.raises(Fatal, match="more than the 1048576 allowed"):
        ctx.checkpoint("x" * (1 << 20))
    assert ctx.last_checkpoint is None


@pytest.mark.reliability_case(40)
def test_a_stale_holder_cannot_checkpoint_and_is_stopped(store: Store, tmp_path: Path) -> None:
    home = Home(tmp_path)
    run_id, _ = claim(store)
    ctx = home.ctx(run_id)
    ctx.checkpoint({"next": 1})
    steal(store, run_id)
    with pytest.raises(FencedOut, match="lease was taken over"):
        ctx.checkpoint({"next": 2})
    assert ctx.cancelled()
    assert home.ctx(run_id).last_checkpoint == {"next": 1}


def test_once_applies_an_effect_once_per_job(store: Store, tmp_path: Path) -> None:
    home = Home(tmp_path)
    calls: list[int] = []

    def effect(i: int, *, twice: bool = False) -> dict[str, Any]:
        calls.append(i)
        return {"i": i, "pair": (i, i * 2) if twice else None}

    run_a, _ = claim(store)
    assert home.ctx(run_a).once("item-1", effect, 1, twice=True) == {"i": 1, "pair": [1, 2]}
    # a later attempt, or another run of the same job: skipped, the recorded result back
    assert home.ctx(run_a).once("item-1", effect, 1) == {"i": 1, "pair": [1, 2]}
    run_b, _ = claim(store)
    assert home.ctx(run_b).once("item-1", effect, 99) == {"i": 1, "pair": [1, 2]}
    assert calls == [1]
    assert "ctx.once(item-1): already done" in home.lines()
    # keys are per job
    run_c, _ = claim(store, job="other-job")
    assert home.ctx(run_c, job="other-job").once("item-1", effect, 5)["i"] == 5
    assert calls == [1, 5]
    found = store.find_operation_key("job", "item-1")
    assert found is not None and found.run_id == run_a


def test_once_errors_record_nothing(store: Store, tmp_path: Path) -> None:
    home = Home(tmp_path)
    run_id, _ = claim(store)

    def broken() -> None:
        raise RuntimeError("the service said no")

    with pytest.raises(RuntimeError, match="the service said no"):
        home.ctx(run_id).once("k", broken)
    assert store.find_operation_key("job", "k") is None
    with pytest.raises(Fatal, match="the result of fn is not JSON-able"):
        home.ctx(run_id).once("k", lambda: object())
    with pytest.raises(Fatal, match="the key must be text"):
        home.ctx(run_id).once("", lambda: 1)
    assert home.ctx(run_id).once("k", lambda: None) is None
    assert store.find_operation_key("job", "k") is not None


def test_once_by_a_stale_holder_is_refused(store: Store, tmp_path: Path) -> None:
    home = Home(tmp_path)
    run_id, _ = claim(store)
    ctx = home.ctx(run_id)
    steal(store, run_id)
    with pytest.raises(FencedOut):
        ctx.once("k", lambda: 1)
    assert store.find_operation_key("job", "k") is None
    assert ctx.cancelled()


def test_a_context_without_a_run_says_so(tmp_path: Path) -> None:
    ctx = Home(tmp_path).ctx("01NOTBOUND00000000000000000")
    assert ctx.last_checkpoint is None
    with pytest.raises(Fatal, match=r"ctx\.checkpoint needs a run executed by Cadenza"):
        ctx.checkpoint({})


# -- connection= : effect and key in one transaction of the target database ---------------

def effects(url: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                "SELECT item FROM effects ORDER BY item")]
    finally:
        engine.dispose()


def make_effects(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE effects (item INTEGER)")
    finally:
        engine.dispose()


def insert_item(conn: sa.Connection, item: int, fail: bool = False) -> dict[str, int]:
    conn.execute(sa.text("INSERT INTO effects (item) VALUES (:i)"), {"i": item})
    if fail:
        raise ValueError(f"item {item} is bad")
    return {"item": item}


@pytest.mark.reliability_case(38)
def test_once_with_connection_commits_effect_and_key_together(
        store: Store, tmp_path: Path) -> None:
    target = f"sqlite:///{(tmp_path / 'target.db').as_posix()}"
    make_effects(target)
    home = Home(tmp_path, {"wh": target})
    run_id, _ = claim(store)
    with pytest.raises(ValueError, match="item 1 is bad"):
        home.ctx(run_id).once("item-1", insert_item, 1, fail=True, connection="wh")
    assert effects(target) == []  # rolled back with the (unrecorded) key
    assert home.ctx(run_id).once("item-1", insert_item, 1, connection="wh") == {"item": 1}
    assert home.ctx(run_id).once("item-1", insert_item, 1, connection="wh") == {"item": 1}
    assert effects(target) == [(1,)]
    engine = sa.create_engine(target)
    with engine.connect() as conn:
        keys = conn.exec_driver_sql(
            "SELECT job_id, op_key, result_json, run_id FROM cadenza_operation_keys").all()
    engine.dispose()
    assert [tuple(k) for k in keys] == [("job", "item-1", '{"item":1}', run_id)]
    mirrored = store.find_operation_key("job", "item-1")  # mirrored into the store
    assert mirrored is not None and mirrored.result == {"item": 1}


def test_once_with_connection_a_stale_holder_rolls_back(store: Store, tmp_path: Path) -> None:
    target = f"sqlite:///{(tmp_path / 'target.db').as_posix()}"
    make_effects(target)
    home = Home(tmp_path, {"wh": target})
    run_id, _ = claim(store)
    ctx = home.ctx(run_id)
    steal(store, run_id)
    with pytest.raises(FencedOut):
        ctx.once("item-7", insert_item, 7, connection="wh")
    assert effects(target) == []


def test_two_runs_racing_on_one_key_make_one_effect(store: Store, pg_url: str,
                                                    tmp_path: Path) -> None:
    """PostgreSQL target: both effects are in flight at once; the second key insert waits
    for the first transaction, finds the key and rolls its own effect back."""
    make_effects(pg_url)
    home = Home(tmp_path, {"wh": pg_url})
    runs = [claim(store)[0], claim(store)[0]]
    both_in = threading.Barrier(2, timeout=20)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def racer(n: int) -> None:
        def effect(conn: sa.Connection) -> dict[str, int]:
            insert_item(conn, n)
            both_in.wait()
            return {"winner": n}

        try:
            results[n] = home.ctx(runs[n]).once("shared", effect, connection="wh")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=racer, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert results[0] == results[1]
    assert len(effects(pg_url)) == 1
    assert effects(pg_url)[0][0] == results[0]["winner"]
    assert "applied it first; this run's effect was rolled back" in home.lines()
