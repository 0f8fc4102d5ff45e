"""Retention (`cadenza prune`, Store.prune) on SQLite and PostgreSQL (SPEC §18, §3 [retention]).

Old runs are made on a FakeClock that is then moved forward: nothing sleeps.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from tests.support.store_helpers import append_log, end_run, start_run
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.store import Store
from cadenza.store.tables import checkpoints, event_log, run_logs, runs, step_runs

OLD = "2027-01-01T00:00:00+00:00"


def finished(store: Store, job: str, state: RunState) -> str:
    """A run of ``job`` that went QUEUED -> RUNNING -> ``state``, with a step, a log line,
    a checkpoint."""
    run_id = store.create_run(job, "manual")
    assert run_id is not None
    assert start_run(store, run_id)
    store._create_step_run(run_id, "s1", "python", state=StepState.RUNNING)
    append_log(store, run_id, "INFO", f"line of {run_id}")
    with store.write() as conn:
        conn.execute(checkpoints.insert().values(run_id=run_id, next_step="s2",
                                                 outputs_json="{}",
                                                 updated_at=store.clock.now()))
    if state is not RunState.RUNNING:
        assert end_run(store, run_id, state)
    return run_id


def counts(store: Store) -> dict[str, int]:
    with store.read() as conn:
        return {t.name: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
                for t in (runs, step_runs, run_logs, checkpoints, event_log)}


def build(store: Store, clock: FakeClock) -> dict[str, list[str]]:
    """Old runs of every state on two jobs, then recent ones; the clock ends 200 days on."""
    made: dict[str, list[str]] = {"a_old_done": [], "active": [], "b_old": [], "recent": []}
    for _ in range(5):
        made["a_old_done"].append(finished(store, "a", RunState.SUCCEEDED))
        clock.advance(60)
    queued = store.create_run("a", "manual")
    assert queued is not None
    review = finished(store, "a", RunState.NEEDS_REVIEW)
    made["active"] += [queued, review, finished(store, "a", RunState.RUNNING)]
    made["b_old"] += [finished(store, "b", RunState.FAILED),
                      finished(store, "b", RunState.CANCELED)]
    missed = store.create_run("b", "scheduled", state=RunState.MISSED, schedule="b",
                              scheduled_for=clock.now())
    assert missed is not None
    made["b_old"].append(missed)
    clock.advance(timedelta(days=200))
    made["recent"].append(finished(store, "a", RunState.SUCCEEDED))
    return made


def test_prune_deletes_old_finished_runs_keeps_last_n_and_never_active(store_url: str) -> None:
    clock = FakeClock(OLD)
    with Store.open(store_url, clock=clock) as store:
        made = build(store, clock)
        before = counts(store)
        dry = store.prune(days=90, keep_last=2, dry_run=True)
        assert counts(store) == before, "a dry run changed the store"
        report = store.prune(days=90, keep_last=2)
        assert (dry.runs, dry.step_runs, dry.logs, dry.events) == (
            report.runs, report.step_runs, report.logs, report.events)
        left = {r.id for r in store.list_runs(limit=1000)}
        # Every active run stays, whatever its age.
        assert set(made["active"]) <= left
        # Job a: the recent run counts among the last 2 finished; one old one is kept.
        assert made["recent"][0] in left
        assert [r for r in made["a_old_done"] if r in left] == [made["a_old_done"][-1]]
        # Job b: the 2 most recent finished (CANCELED, MISSED) stay; the FAILED one goes.
        assert [r for r in made["b_old"] if r in left] == made["b_old"][1:]
        assert report.runs == 5 and report.runs_by_state == {"SUCCEEDED": 4, "FAILED": 1}
        # Cascade: the pruned runs' step runs, log lines and checkpoints are gone.
        with store.read() as conn:
            for table in (step_runs, run_logs, checkpoints):
                orphans = conn.execute(sa.select(sa.func.count()).select_from(table).where(
                    ~table.c.run_id.in_(sa.select(runs.c.id)))).scalar_one()
                assert orphans == 0, table.name
        assert report.step_runs == report.logs == report.checkpoints == 5
        # Old events of pruned runs went; those of kept runs stay; one event says so.
        assert report.events > 0
        assert not store.list_events(run_id=made["a_old_done"][0])
        assert store.list_events(run_id=made["active"][0])
        event = store.list_events(event_type="RETENTION_PRUNED")
        assert len(event) == 1 and event[0].payload["runs"] == 5
        assert event[0].payload["events"] == report.events
        # A second prune finds nothing more and writes no event.
        again = store.prune(days=90, keep_last=2)
        assert (again.runs, again.events, again.event_id) == (0, 0, None)


def test_prune_in_small_batches_gives_the_same_result(sqlite_url: str) -> None:
    clock = FakeClock(OLD)
    with Store.open(sqlite_url, clock=clock) as store:
        build(store, clock)
        report = store.prune(days=90, keep_last=0, batch_size=2)
        assert report.runs == 8 and report.batches >= 4
        assert {r.state for r in store.list_runs(limit=100)} == {
            RunState.QUEUED, RunState.RUNNING, RunState.NEEDS_REVIEW, RunState.SUCCEEDED}


def test_nothing_younger_than_days_is_pruned(sqlite_url: str) -> None:
    clock = FakeClock(OLD)
    with Store.open(sqlite_url, clock=clock) as store:
        ids = [finished(store, "a", RunState.SUCCEEDED) for _ in range(3)]
        clock.advance(timedelta(days=89))
        report = store.prune(days=90, keep_last=0)
        assert report.runs == 0 and report.events == 0
        assert {r.id for r in store.list_runs()} == set(ids)


def test_prune_cli_uses_retention_settings_and_dry_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home), "--example"]).exit_code == 0
    config = home / "cadenza.toml"
    text = config.read_text().replace("[retention]\ndays = 90\nkeep_last_per_job = 100",
                                      "[retention]\ndays = 30\nkeep_last_per_job = 1")
    assert "days = 30" in text
    config.write_text(text)
    url = f"sqlite:///{(home / 'data' / 'cadenza.db').as_posix()}"
    clock = FakeClock("2020-01-01T00:00:00+00:00")  # long ago: everything is old
    with Store.open(url, clock=clock) as store:
        for _ in range(3):
            finished(store, "hello", RunState.SUCCEEDED)
        queued = store.create_run("hello", "manual")
    result = CliRunner().invoke(app, ["--home", str(home), "prune", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    dry = json.loads(result.stdout)
    assert dry["dry_run"] is True and dry["days"] == 30 and dry["keep_last"] == 1
    assert dry["runs"] == 2
    with Store.open(url) as store:
        assert len(store.list_runs()) == 4
    result = CliRunner().invoke(app, ["--home", str(home), "prune", "--keep-last", "0"])
    assert result.exit_code == 0, result.output
    assert "deleted 3 run(s)" in result.stdout and "never pruned" in result.stdout
    with Store.open(url) as store:
        assert [r.id for r in store.list_runs()] == [queued]
        event = store.list_events(event_type="RETENTION_PRUNED")
        assert len(event) == 1 and event[0].actor != "retention"
