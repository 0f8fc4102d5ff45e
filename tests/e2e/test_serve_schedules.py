"""Real `cadenza serve` processes with an injected wall clock (CADENZA_FAKE_NOW).

SPEC §6: downtime across a fire records exactly one MISSED run per fire and
`on_missed` decides what still runs; two servers on one store never record a fire twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.domain.states import RunState
from cadenza.home import Home
from cadenza.store import Store
from tests.e2e.serve_helpers import Served, eventually

pytestmark = pytest.mark.slow

PLUGIN = "def noop():\n    return 1\n"


def make_home(tmp_path: Path, job_extra: str, store_url: str | None = None) -> Home:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home)]).exit_code == 0
    (home / "plugins" / "e2e_tasks.py").write_text(PLUGIN)
    (home / "jobs.toml").write_text(
        '[jobs.nightly]\nschedule = "0 2 * * *"\ntimezone = "UTC"\n' + job_extra +
        '\n[[jobs.nightly.steps]]\nname = "noop"\ntype = "python"\n'
        'callable = "e2e_tasks:noop"\nisolation = "thread"\n')
    if store_url:
        settings = home / "cadenza.toml"
        settings.write_text(settings.read_text().replace(
            'url = "sqlite:///data/cadenza.db"', f'url = "{store_url}"'))
    return Home(home.resolve())


def runs_of(home: Home) -> list[object]:
    store = home.open_store()
    try:
        return list(store.list_runs(job="nightly", limit=100))
    finally:
        store.close()


def down_between(home: Home, first: str, second: str, settled: int) -> list[object]:
    """Serve at ``first``, stop, serve again at ``second``; return the runs once
    ``settled`` runs exist and none is QUEUED or RUNNING."""
    a = Served(home.path, fake_now=first)
    try:
        a.wait_ready()
    finally:
        a.stop()
    b = Served(home.path, fake_now=second)
    try:
        b.wait_ready()

        def settled_runs() -> list[object] | None:
            runs = runs_of(home)
            active = [r for r in runs if r.state in (RunState.QUEUED, RunState.RUNNING)]
            return runs if len(runs) >= settled and not active else None

        return eventually(settled_runs, 40, f"{settled} settled runs")
    finally:
        b.stop()


def test_downtime_over_one_fire_with_skip_records_one_missed(tmp_path: Path) -> None:
    home = make_home(tmp_path, 'on_missed = "skip"')
    runs = down_between(home, "2027-01-05T01:55:00+00:00", "2027-01-05T02:10:00+00:00", 1)
    assert [(r.state, r.scheduled_for.isoformat()) for r in runs] == [
        (RunState.MISSED, "2027-01-05T02:00:00+00:00")]
    assert runs[0].reason


def test_downtime_with_run_latest_runs_the_fire(tmp_path: Path) -> None:
    home = make_home(tmp_path, 'on_missed = "run_latest"')
    runs = down_between(home, "2027-01-05T01:55:00+00:00", "2027-01-05T02:10:00+00:00", 1)
    assert [(r.state, r.scheduled_for.isoformat()) for r in runs] == [
        (RunState.SUCCEEDED, "2027-01-05T02:00:00+00:00")]


def test_three_days_down_with_run_all_and_catchup_max_two(tmp_path: Path) -> None:
    home = make_home(tmp_path, 'on_missed = "run_all"\ncatchup_max = 2')
    runs = down_between(home, "2027-01-05T01:55:00+00:00", "2027-01-08T02:10:00+00:00", 3)
    by_time = sorted((r.scheduled_for.isoformat(), r.state) for r in runs)
    assert by_time == [
        ("2027-01-05T02:00:00+00:00", RunState.MISSED),
        ("2027-01-06T02:00:00+00:00", RunState.SUCCEEDED),
        ("2027-01-07T02:00:00+00:00", RunState.SUCCEEDED),
    ] or by_time == [  # 2027-01-08 02:00 is also a fire; 02:10 is within reach of it
        ("2027-01-05T02:00:00+00:00", RunState.MISSED),
        ("2027-01-06T02:00:00+00:00", RunState.MISSED),
        ("2027-01-07T02:00:00+00:00", RunState.SUCCEEDED),
        ("2027-01-08T02:00:00+00:00", RunState.SUCCEEDED),
    ]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_servers_never_record_one_fire_twice(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    url = None if kind == "sqlite" else str(request.getfixturevalue("pg_url"))
    home = make_home(tmp_path, "", url)
    jobs = home.jobs_file
    jobs.write_text(jobs.read_text().replace('"0 2 * * *"', '"* * * * *"'))
    # The fake time starts when each server's clock is made: 30 s before the 01:59 fire,
    # which two servers starting on a loaded machine (imports, migrations, the node) can
    # take; with 4 s the fire passed before the first tick, and the next came too late.
    # On PostgreSQL a node whose clock is far from the database's does not lead: the servers
    # keep the real time there, and the fire is the next real minute's.
    fake_now = "2027-01-05T01:58:30+00:00" if kind == "sqlite" else None
    servers = [Served(home.path, fake_now=fake_now, web=False) for _ in range(2)]
    try:
        for server in servers:
            server.wait_ready()
        eventually(lambda: [r for r in runs_of(home) if r.state is RunState.SUCCEEDED],
                   70 if fake_now else 100, "a minute's fire executed")
        time.sleep(2)  # let the other server tick over the same fire too
    finally:
        outputs = [s.stop() for s in servers]
    runs = runs_of(home)
    fires = [r.scheduled_for for r in runs]
    assert len(fires) == len(set(fires)), outputs
    assert {r.state for r in runs} <= {RunState.SUCCEEDED, RunState.QUEUED, RunState.RUNNING}


@pytest.mark.reliability_case(1)
def test_reload_refuses_a_bad_file_and_keeps_running(tmp_path: Path) -> None:
    home = make_home(tmp_path, "")
    server = Served(home.path, fake_now="2027-01-05T01:00:00+00:00")
    try:
        server.wait_ready()
        good = home.jobs_file.read_text()
        home.jobs_file.write_text(good + "\n[jobs.broken]\nschedule = \"0 9 * * 7\"\n")

        def config_events(level: str) -> list[object]:
            # Not home.open_store(): that loads jobs.toml, which is broken on purpose here.
            store = Store.open(f"sqlite:///{(home.data_dir / 'cadenza.db').as_posix()}")
            try:
                return [e for e in store.list_events(event_type="CONFIG_CHANGED")
                        if e.level == level]
            finally:
                store.close()

        refused = eventually(lambda: config_events("ERROR"), 20, "a refused reload")
        assert "kept" in refused[0].message
        assert any("day-of-week" in p for p in refused[0].payload["problems"])
        home.jobs_file.write_text(good.replace('"0 2 * * *"', '"0 3 * * *"'))
        applied = eventually(lambda: config_events("INFO"), 20, "an applied reload")
        assert applied[0].payload["changed"] == ["nightly"]
    finally:
        out = server.stop()
    assert "config reload refused" in out
