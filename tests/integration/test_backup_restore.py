"""`cadenza backup` and `cadenza restore` on real SQLite files (SPEC §18; RELIABILITY #54-56).

The online backup is taken while a Node with 4 workers runs jobs and a thread keeps
enqueueing runs; restore is exercised on stopped homes (the refusal under a real
`cadenza serve` is in tests/e2e/test_backup_serve.py).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from tests.support.store_helpers import start_run
from typer.testing import CliRunner

from cadenza.cli.backup import pg_dump_command
from cadenza.cli.main import app
from cadenza.clock import SystemClock
from cadenza.domain.states import RunState
from cadenza.home import Home
from cadenza.node import Node
from cadenza.scheduler.leader import leadership_for
from cadenza.store import Store
from cadenza.store import migrate as migrations
from cadenza.store.engine import create_engine

POSIX = sys.platform != "win32"


def make_home(tmp_path: Path, name: str = "home") -> Path:
    home = tmp_path / name
    result = CliRunner().invoke(app, ["init", str(home), "--example"])
    assert result.exit_code == 0, result.output
    return home


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.stdout, result.stderr


def db_of(home: Path) -> Path:
    return home / "data" / "cadenza.db"


def open_store(path: Path) -> Store:
    return Store.open(f"sqlite:///{path.as_posix()}")


def integrity(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def add_running_run(home: Path) -> str:
    """A run RUNNING with a live lease, as a backup taken mid-run holds it."""
    with open_store(db_of(home)) as store:
        run_id = store.create_run("hello", "manual")
        until = datetime.now(UTC) + timedelta(hours=1)
        assert start_run(store, run_id, owner="gone-host:1:worker", lease_until=until)
    return run_id


# -- backup ---------------------------------------------------------------------------------


@pytest.mark.reliability_case(54, 56)
def test_backup_while_four_workers_write_is_consistent_and_private(tmp_path: Path) -> None:
    home_dir = make_home(tmp_path)
    home = Home(home_dir)
    config = home.load_config()
    store = home.open_store(config)
    node = Node(home, config, store, clock=SystemClock(), workers=4, scheduler=False)
    stop = threading.Event()
    committed: list[str] = []
    latencies: list[float] = []

    def enqueue() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            committed.append(store.create_run("hello", "manual"))
            latencies.append(time.perf_counter() - began)
            time.sleep(0.02)

    writer = threading.Thread(target=enqueue, daemon=True)
    node.start()
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not store.list_runs(state=RunState.SUCCEEDED,
                                                                  limit=8)[7:]:
            time.sleep(0.1)
        assert len(store.list_runs(state=RunState.SUCCEEDED, limit=8)) == 8, "workers idle"
        before_backup = committed[-1]
        during = len(latencies)
        code, stdout, stderr = cli(home_dir, "backup", str(tmp_path / "copy.db"), "--json")
        during_backup = latencies[during:]
        assert code == 0, stderr
    finally:
        stop.set()
        writer.join(10)
        node.stop(30)
        store.close()
    report = json.loads(stdout)
    copy = tmp_path / "copy.db"
    assert report["integrity"] == "ok" and report["secrets_included"] is False
    assert integrity(copy) == "ok"
    if POSIX:
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert during_backup, "the writer made no write while the backup ran"
    # Writers went on during the copy: no write waited anywhere near the busy timeout.
    assert max(during_backup) < 2.0, max(during_backup)
    with open_store(copy) as restored:
        runs = restored.list_runs(limit=100_000)
        assert len(runs) == report["runs"] > 8
        # The copy holds every transaction committed before it began.
        assert restored.get_run(before_backup) is not None
        assert any(r.state is RunState.SUCCEEDED for r in runs)
    # The copy opens as a home's store: `runs list` on a home made of it.
    copy_home = make_home(tmp_path, "copy-home")
    shutil.copyfile(copy, db_of(copy_home))
    code, stdout, _ = cli(copy_home, "runs", "list", "--json", "--limit", "10000")
    assert code == 0
    assert len(json.loads(stdout)) == report["runs"]


def test_backup_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    target = tmp_path / "b.db"
    target.write_text("keep me")
    code, _, stderr = cli(home, "backup", str(target))
    assert code == 1 and "exists; pass --force" in stderr
    assert target.read_text() == "keep me"
    code, stdout, stderr = cli(home, "backup", str(target), "--force")
    assert code == 0, stderr
    assert "integrity ok" in stdout and "secret.key" in stderr
    assert integrity(target) == "ok"
    assert not list(tmp_path.glob(".b.db.*")), "a temporary file was left behind"


def test_backup_into_a_missing_directory_fails_naming_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    code, _, stderr = cli(home, "backup", str(tmp_path / "nowhere" / "b.db"))
    assert code == 1 and "nowhere: no such directory" in stderr


def test_backup_on_postgresql_explains_pg_dump_without_the_password(
        tmp_path: Path, pg_url: str) -> None:
    home = make_home(tmp_path)
    url = sa.make_url(pg_url).set(password="hunter2").render_as_string(hide_password=False)
    config = home / "cadenza.toml"
    config.write_text(config.read_text().replace('url = "sqlite:///data/cadenza.db"',
                                                 f'url = "{url}"'))
    code, stdout, stderr = cli(home, "backup", str(tmp_path / "b.dump"))
    assert code == 2, stdout + stderr
    database = sa.make_url(pg_url).database
    assert "pg_dump --format=custom" in stderr and f"/{database}" in stderr
    assert "hunter2" not in stdout + stderr
    code, _, stderr = cli(home, "restore", str(tmp_path / "b.dump"))
    assert code == 2 and "pg_restore" in stderr and "hunter2" not in stderr


def test_pg_dump_command_is_built_from_the_url_without_password() -> None:
    command_line = pg_dump_command("postgresql+psycopg://ana:s3cret@db.example.org:5433/cz",
                                   "/backups/cz dump")
    assert command_line == ("pg_dump --format=custom --file='/backups/cz dump' "
                            "--dbname=postgresql://ana@db.example.org:5433/cz")


# -- restore --------------------------------------------------------------------------------


@pytest.mark.reliability_case(55)
def test_restore_swaps_keeps_the_old_db_and_expires_running_leases(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    assert cli(home, "run", "hello")[0] == 0
    running = add_running_run(home)
    backup = tmp_path / "b.db"
    assert cli(home, "backup", str(backup))[0] == 0
    assert cli(home, "run", "hello")[0] == 0  # after the backup: only in the live DB
    with open_store(db_of(home)) as store:
        live_ids = {r.id for r in store.list_runs(limit=100)}
    assert len(live_ids) == 3

    started = datetime.now(UTC)
    code, stdout, stderr = cli(home, "restore", str(backup), "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["expired_leases"] == [running] and report["runs"] == 2
    kept = Path(report["previous_database_kept_as"])
    assert kept.name.startswith("cadenza.db.before-restore-") and kept.parent == db_of(home).parent
    with open_store(kept) as old:  # nothing lost: the previous DB is whole
        assert {r.id for r in old.list_runs(limit=100)} == live_ids
    with open_store(db_of(home)) as store:
        restored_ids = {r.id for r in store.list_runs(limit=100)}
        assert len(restored_ids) == 2 and running in restored_ids < live_ids
        run = store.get_run(running)
        assert run is not None and run.state is RunState.RUNNING
        assert run.lease_until is not None and run.lease_until < started
        events = store.list_events(event_type="STORE_RESTORED")
        assert len(events) == 1 and events[0].payload["runs"] == [running]
    assert integrity(db_of(home)) == "ok"


def test_restore_output_for_people_says_what_happens_next(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    add_running_run(home)
    backup = tmp_path / "b.db"
    assert cli(home, "backup", str(backup))[0] == 0
    code, stdout, _ = cli(home, "restore", str(backup))
    assert code == 0
    assert "1 RUNNING run(s) now have an expired lease" in stdout
    assert "missed-run policy" in stdout and "previous database is kept as" in stdout


@pytest.mark.reliability_case(55)
def test_restore_is_refused_while_a_server_holds_the_home(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    backup = tmp_path / "b.db"
    assert cli(home, "backup", str(backup))[0] == 0
    engine = create_engine(f"sqlite:///{db_of(home).as_posix()}")
    leader = leadership_for(engine)  # what `cadenza serve`'s scheduler holds
    assert leader.acquire()
    try:
        before = db_of(home).read_bytes()
        code, _, stderr = cli(home, "restore", str(backup))
        assert code == 1 and "cadenza serve` is running" in stderr
        assert db_of(home).read_bytes() == before
        assert not list(db_of(home).parent.glob("*before-restore*"))
    finally:
        leader.release()
        engine.dispose()


@pytest.mark.parametrize("damage", ["text", "garbled", "foreign", "newer"])
@pytest.mark.reliability_case(55)
def test_restore_rejects_a_bad_file_and_changes_nothing(tmp_path: Path, damage: str) -> None:
    home = make_home(tmp_path)
    assert cli(home, "run", "hello")[0] == 0
    bad = tmp_path / "bad.db"
    if damage == "text":
        bad.write_text("not a database\n")
        expected = "not a SQLite database"
    elif damage == "foreign":
        con = sqlite3.connect(bad)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
        expected = "not a Cadenza store"
    else:
        assert cli(home, "backup", str(bad))[0] == 0
        if damage == "garbled":
            data = bytearray(bad.read_bytes())
            size = int.from_bytes(data[16:18], "big")
            for offset in range(size, len(data), size):  # every page header but the first
                data[offset:offset + 12] = b"\xfe" * 12
            bad.write_bytes(bytes(data))
            expected = "bad.db"
        else:
            con = sqlite3.connect(bad)
            con.execute("UPDATE alembic_version SET version_num = '9999_future'")
            con.commit()
            con.close()
            expected = "newer than this Cadenza knows"
    with open_store(db_of(home)) as store:
        before = [r.id for r in store.list_runs()]
    code, _, stderr = cli(home, "restore", str(bad))
    assert code == 1, stderr
    assert "nothing changed" in stderr and expected in stderr
    with open_store(db_of(home)) as store:
        assert [r.id for r in store.list_runs()] == before
    leftovers = [p.name for p in db_of(home).parent.iterdir()
                 if "restore" in p.name]
    assert leftovers == []


def test_restore_upgrades_a_backup_of_an_older_schema(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    old = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite:///{old.as_posix()}")
    with engine.begin() as conn:
        command.upgrade(migrations.alembic_config(conn), "0003_claim_order_partial")
    engine.dispose()
    code, stdout, stderr = cli(home, "restore", str(old), "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["schema_in_file"] == "0003_claim_order_partial"
    assert report["schema_now"] == migrations.head_revision()
    with open_store(db_of(home)) as store:  # opens without migrating: already at head
        assert store.list_runs() == []


@pytest.mark.reliability_case(55)
def test_an_old_backup_restored_then_scheduled_applies_the_misfire_policy_once(
        tmp_path: Path) -> None:
    """A store backed up at 02:00, used until 05:00 (three more hourly fires), then restored
    from that backup and scheduled again a day later under a FakeClock: the fires the
    backup holds (01:00, 02:00) are not fired again; every fire the store does not hold,
    including the three recorded only after the backup, is handled by its job's on_missed
    (``skip``: recorded MISSED with its reason; ``run_latest``: only the latest runs); a
    second scheduler ticking again records nothing more."""
    from cadenza.clock import FakeClock
    from cadenza.config.schema_jobs import JobConfig
    from cadenza.scheduler.service import Scheduler
    from cadenza.store.maintenance import restore_sqlite
    from cadenza.store.tables import runs

    jobs = {
        "hourly": JobConfig.model_validate({"id": "hourly", "schedule": "0 * * * *",
                                            "timezone": "UTC", "on_missed": "skip",
                                            "max_concurrency": 100}),
        "daily": JobConfig.model_validate({"id": "daily", "schedule": "0 2 * * *",
                                           "timezone": "UTC", "on_missed": "run_latest"}),
    }
    clock = FakeClock(datetime(2027, 3, 1, 0, 30, tzinfo=UTC))
    live, backup = tmp_path / "cadenza.db", tmp_path / "backup.db"
    url = f"sqlite:///{live.as_posix()}"

    def fires(path: Path) -> list[tuple[str, str, str]]:
        with open_store(path) as store, store.read() as conn:
            got = conn.execute(sa.select(runs.c.job_id, runs.c.scheduled_for, runs.c.state)
                               .where(runs.c.schedule.is_not(None))
                               .order_by(runs.c.scheduled_for, runs.c.job_id)).all()
        return [(j, (s if isinstance(s, datetime) else datetime.fromisoformat(s))
                 .strftime("%d %H:%M"), str(getattr(st, "value", st))) for j, s, st in got]

    with Store.open(url, clock=clock) as store:
        scheduler = Scheduler(store, jobs, clock=clock)
        scheduler.tick(clock.now())  # 00:30: the schedules start here
        for hour in range(1, 6):  # on time: 01:00 .. 05:00
            clock.set(datetime(2027, 3, 1, hour, tzinfo=UTC))
            scheduler.tick(clock.now())
            if hour == 2:
                store.backup_sqlite(backup)
    assert [f[:2] for f in fires(backup)] == [("hourly", "01 01:00"), ("daily", "01 02:00"),
                                              ("hourly", "01 02:00")]
    assert len(fires(live)) == 6

    clock.set(datetime(2027, 3, 2, 2, 30, tzinfo=UTC))
    restore_sqlite(live, backup, now=clock.now(), actor="test",
                   open_store=lambda u: Store.open(u, clock=clock))
    with Store.open(url, clock=clock) as store:
        Scheduler(store, jobs, clock=clock).tick(clock.now())
    after = fires(live)
    with Store.open(url, clock=clock) as store:  # another node, or a restart: nothing new
        Scheduler(store, jobs, clock=clock).tick(clock.now())
    assert fires(live) == after
    keys = [(j, when) for j, when, _ in after]
    assert len(keys) == len(set(keys)), "a fire was recorded twice"
    assert after[:3] == [("hourly", "01 01:00", "QUEUED"), ("daily", "01 02:00", "QUEUED"),
                         ("hourly", "01 02:00", "QUEUED")]
    hourly = [f for f in after[3:] if f[0] == "hourly"]
    assert [f[1] for f in hourly] == [f"{d:02d} {h:02d}:00" for d, h in
                                      [(1, h) for h in range(3, 24)] + [(2, 0), (2, 1), (2, 2)]]
    assert {f[2] for f in hourly} == {"MISSED"}
    assert [f[1:] for f in after[3:] if f[0] == "daily"] == [("02 02:00", "QUEUED")]
    with open_store(live) as store:
        reasons = {r.scheduled_for: r.reason for r in store.list_runs(limit=100)
                   if r.job_id == "hourly" and r.state is RunState.MISSED}
    assert len(reasons) == 24
    assert all(reason and "on_missed = skip" in reason for reason in reasons.values())
