"""A crowded due time staged ahead and claimed in chunks (SQLite and PostgreSQL, FakeClock).

The scheduler records the fires of a coming due time ahead (``not_before`` = the fire time);
a node stages their claims (``Stage.prepare``: the admission decision of the due time, each
run's tracker, plan and first step, the rows of its claim encoded) and claims them in chunks
at the due time (``Stage.claim`` -> ``RunClaims.claim_staged``, then ``Staged.begin``).
These tests show that this path writes what the ordinary one writes, and that the checks of
each chunk (due count, load, conditional claim) keep admission correct when something changes
between the staging and the due time: a cancel, a higher-priority run, a cap, another node.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from executor_home import loaded
from test_prepared_burst import _start_workers
from tests.support.store_helpers import claims
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState, StepState
from cadenza.executor import context, staging
from cadenza.executor.staging import Stage
from cadenza.home import Home
from cadenza.node import Node
from cadenza.steps.runtime import RunInfo
from cadenza.store import RunRecord, Store
from cadenza.store.boundary import NewRun

FIRE = datetime.fromisoformat("2027-03-01T02:00:00+00:00")
AHEAD = FIRE - timedelta(seconds=2)  # the scheduler's look-ahead records the fires then
TERMINAL = {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELED, RunState.NEEDS_REVIEW}
OK_EVENTS = ["RUN_CREATED", "STEP_STARTED", "STEP_SUCCEEDED",
             "RUN_FINISHED"]

# Plugin modules are imported once per process: every home of this file gets the same text,
# and the calls file is found in the environment at call time.
PLUGIN = (
    "import os\n"
    "def noop(ctx):\n"
    "    path = os.environ.get('CZ_STAGED_CALLS')\n"
    "    if path:\n"
    "        with open(path, 'a') as fh:\n"
    "            fh.write(ctx.run.id + '\\n')\n"
    "    return 1\n"
)


def _job(name: str, *, schedule: bool = True, isolation: str = "thread") -> str:
    when = 'schedule = "0 2 * * *"\ntimezone = "UTC"\n' if schedule else ""
    return (f"[jobs.{name}]\n{when}"
            f'[[jobs.{name}.steps]]\nname = "noop"\ntype = "python"\n'
            f'callable = "cz_staged_tasks:noop"\nisolation = "{isolation}"\n\n')


def node_home(tmp_path: Path, store_url: str, *, jobs: int, max_runs: int = 1000,
              extra: str = "", name: str = "home") -> Home:
    """A home with ``jobs`` scheduled jobs ``j00``... (daily at FIRE), plus ``extra``."""
    path = tmp_path / name
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    (path / "plugins" / "cz_staged_tasks.py").write_text(PLUGIN)
    (path / "jobs.toml").write_text(
        "".join(_job(f"j{k:02d}") for k in range(jobs)) + extra)
    config = path / "cadenza.toml"
    text = config.read_text().replace('url = "sqlite:///data/cadenza.db"', f'url = "{store_url}"')
    config.write_text(text + f"\n[workers]\ncount = 4\nmax_concurrent_runs = {max_runs}\n")
    return Home(path.resolve())


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each run's step function appends its run id to."""
    path = tmp_path / "calls.txt"
    path.touch()
    monkeypatch.setenv("CZ_STAGED_CALLS", str(path))
    return path


def entered(path: Path) -> Counter[str]:
    return Counter(path.read_text().split())


@contextmanager
def running_node(home: Home, clock: FakeClock, *, workers: int, scheduler: bool = True,
                 owner: str | None = None,
                 claimer: bool | None = None) -> Iterator[tuple[Node, Store]]:
    """A node driven by hand (dispatch_once) whose ``workers`` worker threads run (with
    ``claimer``: its claimer process started and ready, executor/claimer.py)."""
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=workers, scheduler=scheduler,
                owner=owner, claimer=claimer)
    if node.claimer is not None:
        node.claimer.start()
        assert node.claimer.ready(60), node.claimer.broken
    threads = _start_workers(node, workers)
    try:
        yield node, store
    finally:
        node.stop(timeout=10)
        for thread in threads:
            thread.join(5)
        store.close()


def record_ahead(node: Node, clock: FakeClock, count: int) -> None:
    """The scheduler records the fires of FIRE at AHEAD (not_before = FIRE)."""
    assert node.scheduler is not None
    clock.set(FIRE - timedelta(hours=1))
    assert node.scheduler.try_lead()  # its writes are fenced by the leadership
    node.scheduler.tick(clock.now())
    clock.set(AHEAD)
    assert len(node.scheduler.tick(clock.now()).queued) == count


def stage_now(node: Node) -> Stage:
    """One decision at AHEAD: nothing is due, the fires of FIRE are staged."""
    assert node.dispatcher.dispatch_once(AHEAD) == FIRE
    stage = node.dispatcher._stage
    assert stage is not None and stage.due == FIRE
    return stage


def get(store: Store, run_id: str) -> RunRecord:
    run = store.get_run(run_id)
    assert run is not None
    return run


def all_runs(store: Store) -> list[Any]:
    return store.list_runs(limit=1000)


def drain(nodes: list[Node], store: Store, clock: FakeClock, *, cap: int | None = None,
          seconds: float = 30) -> list[Any]:
    """Decide again (writes the ends the workers held back, claims what waits) until every
    run ended; ``cap``: never more RUNNING runs than that at any moment seen."""
    deadline = time.monotonic() + seconds
    while True:
        runs = all_runs(store)
        if cap is not None:
            assert sum(r.state is RunState.RUNNING for r in runs) <= cap
        if all(r.state in TERMINAL for r in runs) or time.monotonic() > deadline:
            return runs
        for node in nodes:
            node.dispatcher.dispatch_once(clock.now())
        time.sleep(0.02)


def assert_ran_once(store: Store, runs: list[Any], calls: Path) -> None:
    """Every run of ``runs`` SUCCEEDED, was claimed once and its function entered once."""
    seen = entered(calls)
    for run in runs:
        assert run.state is RunState.SUCCEEDED, (run.id, run.state, run.error)
        assert run.lease_epoch == 1
        assert seen[run.id] == 1, run.id
        (step,) = store.list_step_runs(run.id)
        assert (step.state, step.attempt, step.rows) == (StepState.SUCCEEDED, 1, 1)
        kinds = [e.event_type for e in store.list_events(run_id=run.id)]
        # a run that had to wait for a free slot has its RUN_WAITING too
        assert [k for k in kinds if k != "RUN_WAITING"] == OK_EVENTS, run.id


def assert_canceled_and_rest_ran(node: Node, store: Store, clock: FakeClock, calls: Path,
                                 victim: str, rest_count: int) -> list[Any]:
    """After draining: ``victim`` was CANCELED and never started; the ``rest_count`` other
    runs each ran once. Returns the others."""
    runs = drain([node], store, clock)
    assert get(store, victim).state is RunState.CANCELED
    assert store.list_step_runs(victim) == [] and victim not in entered(calls)
    rest = [r for r in runs if r.id != victim]
    assert len(rest) == rest_count
    assert_ran_once(store, rest, calls)
    return rest


def spy_claims(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[int]:
    """The size of each staged chunk claimed through ``store``."""
    sizes: list[int] = []
    real = store.claim_staged

    def spy(conn: Any, staged: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
        sizes.append(len(staged))
        return real(conn, staged, *args, **kwargs)

    monkeypatch.setattr(store, "claim_staged", spy)
    return sizes


# -- 1. parity with the ordinary claim ----------------------------------------------------

PARITY_JOBS = """
[jobs.par]
params = { n = "4" }
[[jobs.par.steps]]
name = "count"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
"""

_TIMES = {"started_at", "finished_at", "duration_s"}


def _masked(payload: Any) -> Any:
    if isinstance(payload, dict):
        return {k: ("<time>" if k in _TIMES else "<id>" if k == "step_run_id" else _masked(v))
                for k, v in payload.items()}
    return payload


def _run_fields(run: Any) -> tuple[Any, ...]:
    return (run.job_id, run.state, run.trigger, run.priority, run.params, run.overrides,
            run.rows, run.error, run.reason, run.wait_reason, run.lease_owner,
            run.lease_until, run.lease_epoch, run.attempt, run.resumes,
            run.started_at is not None, run.finished_at is not None)


def test_a_staged_claim_writes_what_the_ordinary_claim_writes(
    tmp_path: Path, store_url: str
) -> None:
    with loaded(tmp_path / "home", PARITY_JOBS, store_url=store_url) as bench:
        store, executor = bench.store, bench.executor
        staged_id, plain_id = store.create_runs([NewRun("par", "manual:test"),
                                                 NewRun("par", "manual:test")])
        now = store.clock.now()
        until = now + timedelta(minutes=5)

        staged = executor.stage(get(store, staged_id), now, until)
        assert staged is not None and staged.run_id == staged_id
        assert get(store, staged_id).state is RunState.QUEUED
        assert claims(store, staged_id) == []
        with store.write() as conn:
            ids = store.claim_staged(conn, [staged.start], executor.owner, until, now=now)
        assert set(ids) == {staged_id}
        with store.write() as conn:
            (plain,) = executor.claim_and_start(conn, limit=1, lease_until=until,
                                                run_ids=[plain_id])

        # Claimed: the same run row (RUNNING, epoch 1, this owner, the lease, started).
        claimed = {r: store.get_run(r) for r in (staged_id, plain_id)}
        assert _run_fields(claimed[staged_id]) == _run_fields(claimed[plain_id])
        run = claimed[staged_id]
        assert run is not None
        assert (run.state, run.lease_epoch, run.lease_owner, run.lease_until) == (
            RunState.RUNNING, 1, executor.owner, until)
        assert run.started_at == now
        (first,) = store.list_step_runs(staged_id)
        assert first.id == ids[staged_id] and first.state is StepState.RUNNING
        assert first.started_at == now

        outcomes = [staged.begin(ids[staged_id], now).go(), plain.go()]
        assert [o.state for o in outcomes] == [RunState.SUCCEEDED] * 2

        runs = {r: get(store, r) for r in (staged_id, plain_id)}
        assert _run_fields(runs[staged_id]) == _run_fields(runs[plain_id])
        assert runs[staged_id].state is RunState.SUCCEEDED
        assert runs[staged_id].rows == 4
        assert runs[staged_id].params == {"n": "4"}

        def steps(run_id: str) -> list[tuple[Any, ...]]:
            return [(s.step, s.step_type, s.attempt, s.state, s.rows, s.output, s.error,
                     s.error_class, s.reason, s.started_at is not None,
                     s.finished_at is not None) for s in store.list_step_runs(run_id)]

        assert steps(staged_id) == steps(plain_id) == [
            ("count", "python", 1, StepState.SUCCEEDED, 4, {}, None, None, None, True, True)]

        def events(run_id: str) -> list[tuple[Any, ...]]:
            (step,) = store.list_step_runs(run_id)
            found = store.list_events(run_id=run_id)
            for event in found:  # every step event names the run's step run
                if event.event_type.startswith("STEP_"):
                    assert event.payload["step_run_id"] == step.id
            return [(e.event_type, e.level, re.sub(r" in \d+(\.\d+)?s\b", " in <t>s",
                                                   e.message), e.actor, _masked(e.payload))
                    for e in found]

        assert [e[0] for e in events(staged_id)] == OK_EVENTS
        assert events(staged_id) == events(plain_id)
        (claim_event,) = claims(store, staged_id)
        assert claim_event.created_at == now

        def lines(run_id: str) -> list[tuple[str, str | None, str]]:
            return [(line.level, line.step, re.sub(r" in \d+(\.\d+)?s\b", " in <t>s",
                                                   line.message))
                    for line in store.run_log(run_id)]

        # The run log is the run's events: no line restates them.
        assert store.list_logs(staged_id) == store.list_logs(plain_id) == []
        assert lines(staged_id) == lines(plain_id)
        assert lines(staged_id)[1:] == [
            ("INFO", "count", "run QUEUED -> RUNNING, step count (python, attempt 1) RUNNING"),
            ("INFO", "count", "step count (attempt 1) RUNNING -> SUCCEEDED (4 rows in <t>s)"),
            ("INFO", None, "run of par finished SUCCEEDED (4 rows in <t>s)")]
        # The first boundary's event keeps the claim's time.
        assert store.run_log(staged_id)[1].ts == now


def test_a_staged_claim_takes_only_runs_still_queued_fresh_and_due(
    tmp_path: Path, store_url: str
) -> None:
    with loaded(tmp_path / "home", PARITY_JOBS, store_url=store_url) as bench:
        store, executor = bench.store, bench.executor
        now = store.clock.now()
        until = now + timedelta(minutes=5)
        canceled, taken, later, ok = store.create_runs(
            [NewRun("par", "manual:test"), NewRun("par", "manual:test"),
             NewRun("par", "manual:test", not_before=now + timedelta(minutes=1)),
             NewRun("par", "manual:test")])
        maybe = {r: executor.stage(get(store, r), now, until)
                 for r in (canceled, taken, later, ok)}
        stages = {r: s for r, s in maybe.items() if s is not None}
        assert len(stages) == 4
        assert store.request_cancel(canceled, "tester").canceled
        store.claim_runs("elsewhere:1:1", until, run_ids=[taken])
        with store.write() as conn:
            ids = store.claim_staged(conn, [s.start for s in stages.values()],
                                     executor.owner, until, now=now)
        assert set(ids) == {ok}
        assert get(store, canceled).state is RunState.CANCELED
        assert get(store, later).lease_epoch == 0
        other = get(store, taken)
        assert (other.lease_epoch, other.lease_owner) == (1, "elsewhere:1:1")
        for run_id in (canceled, taken, later):
            assert store.list_step_runs(run_id) == []
            assert "STEP_STARTED" not in [e.event_type for e in store.list_events(run_id=run_id)]
        started = stages[ok].begin(ids[ok], now)
        assert started.go().state is RunState.SUCCEEDED
        # The stages never begun hold nothing: their trackers were never registered.
        assert executor.keeper.held() == []


def test_a_run_claimed_long_after_thousands_were_staged_is_bound_to_this_process(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process remembers the latest runs it holds (a call_job step looks its run up
    as it runs); a crowd of staged runs pushes the first ones out before they are claimed,
    so the claim binds each run again. Here the memory holds one run."""
    monkeypatch.setattr(context, "_MAX_BOUND", 1)
    with loaded(tmp_path / "home", PARITY_JOBS, store_url=store_url) as bench:
        store, executor = bench.store, bench.executor
        first_id, second_id = store.create_runs([NewRun("par", "manual:test"),
                                                 NewRun("par", "manual:test")])
        now = store.clock.now()
        until = now + timedelta(minutes=5)
        first, second = (executor.stage(get(store, r), now, until)
                         for r in (first_id, second_id))
        assert first is not None and second is not None

        def bound(run_id: str) -> bool:
            return context.bound_progress(RunInfo(run_id, "par", "manual:test", None,
                                                  "INFO")) is not None

        assert not bound(first_id) and bound(second_id)  # pushed out by the second
        with store.write() as conn:
            ids = store.claim_staged(conn, [first.start], executor.owner, until, now=now)
            started = first.claimed_in(conn, ids[first_id], now)
        assert bound(first_id)
        assert started.go().state is RunState.SUCCEEDED


# -- 2. a node stages a crowded due time and claims it in chunks ----------------------------

def test_a_node_stages_a_due_time_and_claims_it_in_chunks(
    tmp_path: Path, store_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = 40
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        queued = all_runs(store)
        assert set(stage.staged) == {r.id for r in queued} and len(stage) == jobs
        assert {(r.state, r.lease_epoch, r.not_before) for r in queued} == {
            (RunState.QUEUED, 0, FIRE)}
        assert entered(calls) == Counter()
        sizes = spy_claims(monkeypatch, store)

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert node.dispatcher._stage is None
        assert stage.dropped is None and stage.claimed == jobs
        assert sizes == [staging.CHUNKS[0], jobs - staging.CHUNKS[0]]  # 16, then 24
        assert stage.chunks == 2
        assert_claimed_at_fire_and_ran(node, store, clock, calls, jobs)


def spy_calls(monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> list[int]:
    """Each call of ``target.name`` appends one to the list returned."""
    counted: list[int] = []
    real = getattr(target, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, spy)
    return counted


def test_runs_beyond_the_free_workers_are_claimed_with_what_was_staged(
    tmp_path: Path, store_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 runs due, 4 free workers: every run is staged ahead, 4 are claimed in the stage's
    chunk, and the decisions after it claim the other 36 as workers free up, with the
    rows and first steps prepared ahead: no ordinary claim, no step planned again."""
    jobs, workers = 40, 4
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=workers) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        assert set(stage.staged) == {r.id for r in all_runs(store)}
        assert len(stage) == workers  # the chunks claim for the free workers only
        sizes = spy_claims(monkeypatch, store)
        executor = node.holder.current.executor
        ordinary = spy_calls(monkeypatch, executor, "claim_and_start")
        planned = spy_calls(monkeypatch, executor.steps, "prepare")

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.claimed == workers and sum(sizes) > workers
        runs = drain([node], store, clock)
        assert len(runs) == jobs
        assert_ran_once(store, runs, calls)
        assert sum(sizes) == jobs and ordinary == [] and planned == []
        assert len(node.dispatcher._prepared) == 0
        for run in runs:
            (step,) = store.list_step_runs(run.id)
            assert step.started_at == FIRE == run.started_at
            assert [(line.level, line.step, line.event) for line in store.run_log(run.id)
                    ] == [("INFO", None, "RUN_CREATED"), ("INFO", "noop", "STEP_STARTED"),
                          ("INFO", "noop", "STEP_SUCCEEDED"), ("INFO", None, "RUN_FINISHED")]


def test_a_run_staged_beyond_the_chunks_and_canceled_never_runs(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    jobs, workers = 20, 2
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=workers) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        chunked = {s.run_id for s in stage.order}
        victim = next(r for r in stage.staged if r not in chunked)
        assert store.request_cancel(victim, "tester").canceled

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert_canceled_and_rest_ran(node, store, clock, calls, victim, jobs - 1)
        assert get(store, victim).lease_epoch == 0


@pytest.mark.parametrize("why", ["reload", "late"])
def test_staged_runs_left_after_a_reload_or_their_time_are_claimed_the_ordinary_way(
    tmp_path: Path, store_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """What was prepared with a configuration that a reload replaced, or for a due time
    more than PREPARED_FOR ago, is not used: those runs are claimed the ordinary way (the
    new configuration's plan), and each runs once."""
    jobs, workers = 12, 2
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=workers) as (node, store):
        record_ahead(node, clock, jobs)
        stage_now(node)
        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        left = len(node.dispatcher._prepared)
        assert 0 < left < jobs
        if why == "reload":
            home.jobs_file.write_text(home.jobs_file.read_text() + "\n# edited\n")
            assert node.holder.reload() is True
        else:
            clock.set(FIRE + staging.PREPARED_FOR)
        sizes = spy_claims(monkeypatch, store)
        ordinary = spy_calls(monkeypatch, node.holder.current.executor, "claim_and_start")
        runs = drain([node], store, clock)
        assert len(runs) == jobs
        assert_ran_once(store, runs, calls)
        assert sizes == [] and len(ordinary) > 0
        assert len(node.dispatcher._prepared) == 0


def assert_claimed_at_fire_and_ran(node: Node, store: Store, clock: FakeClock, calls: Path,
                                   jobs: int) -> list[Any]:
    """Every run was claimed at FIRE by ``node``; then each ran once, with the usual log
    lines and its first step started at FIRE. Returns the runs."""
    for run in all_runs(store):  # claimed at the due time
        assert run.lease_epoch == 1 and run.started_at == FIRE
        assert run.lease_owner is None or run.lease_owner == node.owner
    runs = drain([node], store, clock)
    assert len(runs) == jobs
    assert_ran_once(store, runs, calls)
    for run in runs:
        assert store.list_logs(run.id) == []  # nothing restates the events
        assert [(line.level, line.step, line.event)
                for line in store.run_log(run.id)] == [
            ("INFO", None, "RUN_CREATED"),
            ("INFO", "noop", "STEP_STARTED"),
            ("INFO", "noop", "STEP_SUCCEEDED"),
            ("INFO", None, "RUN_FINISHED")]
        (step,) = store.list_step_runs(run.id)
        assert step.started_at == FIRE
    return runs


def test_a_run_held_far_ahead_is_not_staged_until_its_last_seconds(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    """A run held by not_before an hour ahead is not staged at each decision of the hour
    (the decisions re-staged it and checkpointed the WAL, W6): only within
    STAGE_MAX_AHEAD of its time."""
    home = node_home(tmp_path, store_url, jobs=1)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=2, scheduler=False) as (node, store):
        later = FIRE + timedelta(hours=1)
        (run_id,) = store.create_runs([NewRun("j00", "manual:t", not_before=later)])
        assert node.dispatcher.dispatch_once(AHEAD) == later
        assert node.dispatcher._stage is None
        near = later - timedelta(seconds=2)
        clock.set(near)
        assert node.dispatcher.dispatch_once(near) == later
        stage = node.dispatcher._stage
        assert stage is not None and stage.due == later and set(stage.staged) == {run_id}


def test_a_stage_claimed_too_late_is_left_to_the_ordinary_decision(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    """More than LATE after the due time no chunk is claimed: the ordinary decisions take
    the runs (with what was staged for them, within PREPARED_FOR)."""
    jobs = 20
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        late = FIRE + staging.LATE + timedelta(seconds=1)
        clock.set(late)
        node.dispatcher.dispatch_once(late)
        assert node.dispatcher._stage is None and stage.claimed == 0 and stage.chunks == 0
        runs = drain([node], store, clock)
        assert len(runs) == jobs
        assert_ran_once(store, runs, calls)
        assert {r.started_at for r in runs} == {late}


# -- 3. what changes between the staging and the due time ----------------------------------

def test_a_run_canceled_after_staging_never_runs(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    jobs = 20
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        assert len(stage) == jobs
        victim = stage.order[0].run_id  # the first of the first chunk
        assert store.request_cancel(victim, "tester").canceled  # `cadenza runs cancel`

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.dropped == "the runs due changed since they were staged (0 more, 1 gone)"
        runs = drain([node], store, clock)
        gone = store.get_run(victim)
        assert gone is not None and gone.state is RunState.CANCELED and gone.lease_epoch == 0
        assert store.list_step_runs(victim) == []
        assert victim not in entered(calls)
        rest = [r for r in runs if r.id != victim]
        assert len(rest) == jobs - 1
        assert_ran_once(store, rest, calls)


def test_a_run_canceled_between_two_chunks_never_runs(
    tmp_path: Path, store_url: str, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel is written after the first chunk committed (SQLite: the runs version
    changed, so the second chunk checks the runs due again)."""
    jobs = 40
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        victim = stage.order[staging.CHUNKS[0]].run_id  # the first of the second chunk
        real = Stage.claim
        chunks: list[int] = []

        def claim(self: Stage, conn: Any, limit: int) -> list[Any]:
            chunks.append(limit)
            if len(chunks) == 2:  # another writer, between the chunks
                assert store.request_cancel(victim, "tester", conn=conn).canceled
            return real(self, conn, limit)

        monkeypatch.setattr(Stage, "claim", claim)
        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert len(chunks) == 2
        assert stage.claimed == staging.CHUNKS[0]
        assert stage.dropped == "the runs due changed since they were staged (0 more, 1 gone)"
        assert_canceled_and_rest_ran(node, store, clock, calls, victim, jobs - 1)


def test_a_cancel_and_a_new_due_run_drop_the_stage_before_any_claim(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    """A cancel and a new due run: as many runs are due as were staged, but not the same
    ones; the stage is dropped before it claims anything, the ordinary decision runs the
    rest."""
    jobs = 20
    home = node_home(tmp_path, store_url, jobs=jobs, extra=_job("extra", schedule=False))
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs + 1) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        victim = stage.order[0].run_id
        assert store.request_cancel(victim, "tester").canceled
        (extra,) = store.create_runs([NewRun("extra", "manual:test")])

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.dropped == "the runs due changed since they were staged (1 more, 1 gone)"
        assert stage.claimed == 0
        runs = drain([node], store, clock)
        assert get(store, victim).state is RunState.CANCELED
        assert store.list_step_runs(victim) == [] and victim not in entered(calls)
        rest = [r for r in runs if r.id != victim]
        assert extra in {r.id for r in rest} and len(rest) == jobs
        assert_ran_once(store, rest, calls)


def _admission_order(runs: list[Any]) -> list[str]:
    return [r.id for r in sorted(
        runs, key=lambda r: (-r.priority, r.scheduled_for or r.created_at, r.id))]


@pytest.mark.parametrize("cancel_one", [False, True], ids=["vip", "vip-and-a-cancel"])
def test_a_higher_priority_run_queued_after_staging_is_admitted_first(
    tmp_path: Path, store_url: str, calls: Path, cancel_one: bool
) -> None:
    """A priority-5 manual run queued after staging, under max_concurrent_runs = 10, is
    admitted first. With a cancel of a run the stage did not admit as well, as many runs
    are due as were staged, but not the same ones: still dropped, still in order."""
    jobs, cap = 20, 10
    home = node_home(tmp_path, store_url, jobs=jobs, max_runs=cap,
                     extra=_job("vip", schedule=False))
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        order = _admission_order(all_runs(store))
        assert len(stage) == cap  # [workers] max_concurrent_runs
        assert [s.run_id for s in stage.order] == order[:cap]
        if cancel_one:
            assert store.request_cancel(order[-1], "tester").canceled  # not staged
        (vip,) = store.create_runs([NewRun("vip", "manual:test", priority=5)])

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.dropped is not None and stage.claimed == 0  # the ordinary decision
        claimed = {r.id for r in all_runs(store) if r.lease_epoch > 0}
        assert claimed == {vip, *order[:cap - 1]}

        runs = drain([node], store, clock, cap=cap)
        ran = [r for r in runs if not (cancel_one and r.id == order[-1])]
        assert len(ran) == jobs + 1 - cancel_one
        assert_ran_once(store, ran, calls)


def _claim_events(store: Store, run_id: str) -> list[Any]:
    return claims(store, run_id)


@pytest.mark.reliability_case(51)
def test_a_job_cap_holds_when_a_run_of_it_started_after_staging(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    jobs = 20  # every job has max_concurrency = 1 (the default)
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        assert len(stage) == jobs
        (held,) = [r for r in all_runs(store) if r.job_id == "j00"]
        # Another decision started a manual run of j00 meanwhile (this node's executor).
        (manual,) = store.create_runs([NewRun("j00", "manual:test")])
        with store.write() as conn:
            (started,) = node.holder.current.executor.claim_and_start(
                conn, limit=1, lease_until=AHEAD + timedelta(minutes=1), run_ids=[manual])

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.dropped is None  # the load changed: the stage decided again
        assert stage.claimed == jobs - 1
        waiting = store.get_run(held.id)
        assert waiting is not None and waiting.state is RunState.QUEUED
        assert waiting.lease_epoch == 0 and waiting.wait_reason
        assert sum(r.state is RunState.RUNNING for r in store.list_runs(job="j00")) == 1

        assert started.go().state is RunState.SUCCEEDED
        node.recorder.flush()
        runs = drain([node], store, clock)
        assert len(runs) == jobs + 1
        assert_ran_once(store, runs, calls)
        # j00's scheduled run was claimed only after the manual one ended.
        ended = max(e.event_id for e in _claim_events(store, manual))
        begun = min(e.event_id for e in _claim_events(store, held.id))
        assert begun > ended


def test_the_global_cap_holds_when_a_run_started_after_staging(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    jobs, cap = 20, 10
    home = node_home(tmp_path, store_url, jobs=jobs, max_runs=cap,
                     extra=_job("other", schedule=False))
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs) as (node, store):
        record_ahead(node, clock, jobs)
        stage = stage_now(node)
        assert len(stage) == cap
        (manual,) = store.create_runs([NewRun("other", "manual:test")])
        with store.write() as conn:
            (started,) = node.holder.current.executor.claim_and_start(
                conn, limit=1, lease_until=AHEAD + timedelta(minutes=1), run_ids=[manual])

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.claimed == cap - 1
        assert sum(r.lease_epoch > 0 for r in all_runs(store)) == cap
        order = _admission_order([r for r in all_runs(store) if r.id != manual])
        assert {r.id for r in all_runs(store) if r.lease_epoch > 0} == {
            manual, *order[:cap - 1]}

        assert started.go().state is RunState.SUCCEEDED
        node.recorder.flush()
        runs = drain([node], store, clock, cap=cap)
        assert len(runs) == jobs + 1
        assert_ran_once(store, runs, calls)


# -- 4. two nodes stage the same due time -------------------------------------------------

@pytest.mark.reliability_case(46)
def test_two_nodes_staging_the_same_due_time_claim_each_run_once(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    two_nodes_race(tmp_path, store_url, calls, claimer=False)


def test_two_nodes_with_claimer_processes_claim_each_run_once(
    tmp_path: Path, sqlite_url: str, calls: Path
) -> None:
    """Each node's chunks after its first are written by its claimer process
    (executor/claimer.py; SQLite files only)."""
    two_nodes_race(tmp_path, sqlite_url, calls, claimer=True)


def two_nodes_race(tmp_path: Path, store_url: str, calls: Path, *, claimer: bool) -> None:
    jobs = 60 if claimer else 24
    home = node_home(tmp_path, store_url, jobs=jobs)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs, owner="node-a:1:1",
                      claimer=claimer) as (a, store), \
            running_node(home, clock, workers=jobs, scheduler=False, owner="node-b:2:2",
                         claimer=claimer) as (b, _):
        record_ahead(a, clock, jobs)
        stages = [stage_now(a), stage_now(b)]
        assert [len(s) for s in stages] == [jobs, jobs]
        assert set(stages[0].staged) == set(stages[1].staged)

        clock.set(FIRE)
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def dispatch(node: Node) -> None:
            try:
                barrier.wait(5)
                node.dispatcher.dispatch_once(FIRE)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=dispatch, args=(n,)) for n in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        runs = drain([a, b], store, clock)
        assert len(runs) == jobs
        assert_ran_once(store, runs, calls)
        owners = Counter(c.payload["fields"]["lease_owner"] for c in claims(store))
        assert sum(owners.values()) == jobs
        assert set(owners) <= {"node-a:1:1", "node-b:2:2"}
        assert sum(s.claimed for s in stages) <= jobs


# -- 5. a process-isolated first step is not staged ----------------------------------------

def test_a_process_step_is_not_staged_and_runs_the_ordinary_way(
    tmp_path: Path, store_url: str, calls: Path
) -> None:
    jobs = 4
    extra = _job("proc", isolation="process")
    home = node_home(tmp_path, store_url, jobs=jobs, extra=extra)
    clock = FakeClock(FIRE - timedelta(hours=1))
    with running_node(home, clock, workers=jobs + 1) as (node, store):
        record_ahead(node, clock, jobs + 1)
        (proc,) = [r for r in all_runs(store) if r.job_id == "proc"]
        executor = node.holder.current.executor
        assert executor.stage(proc, FIRE, FIRE + executor.lease) is None
        stage = stage_now(node)
        assert len(stage) == jobs and proc.id not in stage.staged

        clock.set(FIRE)
        node.dispatcher.dispatch_once(FIRE)
        assert stage.claimed == jobs
        # the ordinary decision after the stage claims the process run at once
        claimed = store.get_run(proc.id)
        assert claimed is not None and claimed.lease_epoch == 1
        runs = drain([node], store, clock)
        assert len(runs) == jobs + 1
        assert_ran_once(store, runs, calls)
