"""PostgreSQL: a run queued by anyone is heard at once (``NOTIFY cadenza_queued``).

A trigger of ``runs`` signals every transaction that makes a row QUEUED (a new run, a run
queued again); each dispatcher listens on a connection of its own
(``cadenza.store.queue_signal``), wakes at once, and skips its idle poll's read of the
queue while nothing was signalled. Real servers only: the machine's PostgreSQL, a second
process for "another node or the CLI", ``pg_terminate_backend`` for a dropped connection.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.home import Home
from cadenza.node import Node
from cadenza.store import Store, queue_signal
from cadenza.store.admission import QueueWatch
from cadenza.store.boundary import NewRun
from cadenza.store.queue_signal import LOOK_AT_LEAST, QueueListener

START = "2027-01-01T00:00:00+00:00"


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = Store.open(pg_url, clock=FakeClock(START))
    yield store
    store.close()


def until(probe: Callable[[], object], what: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds}s: {what}")
        time.sleep(0.01)


def listening(store: Store) -> tuple[QueueListener, threading.Event]:
    heard = threading.Event()
    listener = QueueListener(store.engine, heard.set)
    until(lambda: listener.token is not None, "the listener listens")
    until(heard.is_set, "the signal given on connecting")
    heard.clear()
    return listener, heard


def create_in_another_process(url: str, job: str) -> None:
    code = ("import sys; from cadenza.store import Store; "
            "from cadenza.store.boundary import NewRun; s = Store.open(sys.argv[1]); "
            "s.create_runs([NewRun(sys.argv[2], 'manual:cli')]); s.close()")
    subprocess.run([sys.executable, "-c", code, url, job], check=True, timeout=60)


def test_a_run_queued_by_another_process_is_heard_at_once(pg_url: str,
                                                          pg_store: Store) -> None:
    listener, heard = listening(pg_store)
    try:
        before = listener.token
        create_in_another_process(pg_url, "j")
        until(heard.is_set, "the other process's run is heard", 5.0)
        assert listener.token == (before or 0) + 1
    finally:
        listener.close()


def test_only_a_row_becoming_queued_signals(pg_url: str, pg_store: Store) -> None:
    """Claims and ends send nothing; a new run and a run queued again by the reaper do.
    Notifications arrive in commit order, so once a later transaction's is heard, an
    earlier one's would have been."""
    other = Store.open(pg_url, clock=FakeClock(START))
    listener, _heard = listening(pg_store)
    try:
        def signals() -> int:
            token = listener.token
            assert token is not None
            return token

        first = signals()
        ids = other.create_runs([NewRun("a", "manual:t"), NewRun("b", "manual:t")])
        until(lambda: signals() == first + 1, "one signal for the two runs of one commit")

        clock = other.clock
        assert isinstance(clock, FakeClock)
        claimed = other.claim_runs("elsewhere:1:1", clock.now() + timedelta(seconds=30),
                                   limit=2, run_ids=ids)
        assert {c.id for c in claimed} == set(ids)
        other.request_cancel(ids[1], "test")  # RUNNING, cancel requested: no state change
        marker = other.create_runs([NewRun("c", "manual:t")])
        until(lambda: signals() == first + 2, "the marker run's signal")
        assert signals() == first + 2  # the claim sent nothing

        clock.advance(timedelta(seconds=60))  # the leases expire: the reaper re-queues
        recovered = other.reap_expired_run_leases()
        assert {r.run_id for r in recovered} == set(ids)
        assert other.get_run(ids[0]).state is RunState.QUEUED
        assert other.get_run(ids[1]).state is RunState.CANCELED
        until(lambda: signals() == first + 3, "the re-queued run's signal")
        assert other.get_run(marker[0]).state is RunState.QUEUED
    finally:
        listener.close()
        other.close()


def test_an_idle_poll_reads_the_queue_only_after_a_signal(pg_url: str,
                                                          pg_store: Store) -> None:
    looks = [0]

    def look() -> bool:
        looks[0] += 1
        return pg_store.has_queued_runs()

    listener, heard = listening(pg_store)
    clock = pg_store.clock
    assert isinstance(clock, FakeClock)
    watch = QueueWatch(look, None, listener, clock)
    try:
        assert watch.any_queued() is False and looks == [1]
        for _ in range(5):
            clock.advance(timedelta(seconds=5))
            assert watch.any_queued() is False
        assert looks == [1]  # nothing signalled: no read
        clock.advance(timedelta(seconds=LOOK_AT_LEAST - 25))
        assert watch.any_queued() is False and looks == [2]  # but one every 30 s

        (run_id,) = pg_store.create_runs([NewRun("j", "manual:test")])
        until(heard.is_set, "the signal")
        assert watch.any_queued() is True and looks == [3]
        assert watch.any_queued() is True and looks == [4]  # queued: every poll reads
        pg_store.request_cancel(run_id, "test")  # QUEUED -> CANCELED: no signal
        assert watch.any_queued() is False and looks == [5]
        assert watch.any_queued() is False and looks == [5]
    finally:
        watch.close()


def test_a_dropped_listening_connection_is_replaced(pg_url: str, pg_store: Store,
                                                   _pg_admin: sa.Engine) -> None:
    """The server drops the listener's session: until it listens again every poll reads
    (nothing may be concluded from silence), then it signals once for what it missed."""
    looks = [0]

    def look() -> bool:
        looks[0] += 1
        return pg_store.has_queued_runs()

    listener, heard = listening(pg_store)
    watch = QueueWatch(look, None, listener)
    database = sa.make_url(pg_url).database
    try:
        assert watch.any_queued() is False and watch.any_queued() is False and looks == [1]
        with _pg_admin.connect() as c:
            killed = c.execute(sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = :db AND application_name = 'cadenza listen'"),
                {"db": database}).scalar_one()
        assert killed == 1
        until(lambda: listener.token is None, "the listener sees its connection gone")
        assert watch.any_queued() is False and watch.any_queued() is False
        assert looks == [3]  # not listening: every poll reads
        create_in_another_process(pg_url, "while-deaf")  # may not be heard: it is read
        until(lambda: listener.token is not None, "the listener listens again", 20.0)
        until(heard.is_set, "the signal given on listening again")
        assert watch.any_queued() is True
    finally:
        watch.close()


def test_silence_is_not_trusted_while_the_listeners_probe_is_not_heard(
        pg_url: str, pg_store: Store, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Behind a proxy that pools transactions no notification reaches an idle client, so
    the listener's probe is never heard: a warning says so and every poll reads the queue
    (the probe is not sent here, which looks the same from the listener)."""
    monkeypatch.setattr(QueueListener, "_send_probe", lambda self, probe: None)
    monkeypatch.setattr(queue_signal, "PROBE_WAIT", 0.5)
    looks = [0]

    def look() -> bool:
        looks[0] += 1
        return pg_store.has_queued_runs()

    heard = threading.Event()
    listener = QueueListener(pg_store.engine, heard.set)
    watch = QueueWatch(look, None, listener, pg_store.clock)
    try:
        until(lambda: "notifications of queued runs do not arrive" in caplog.text,
              "the warning that notifications do not arrive")
        assert listener.token is None
        assert watch.any_queued() is False and watch.any_queued() is False
        assert looks == [2]  # silence means nothing: every poll reads
        heard.clear()
        create_in_another_process(pg_url, "j")  # a notification that does arrive still wakes
        until(heard.is_set, "the wake")
        assert watch.any_queued() is True
    finally:
        watch.close()


TASK = "def noop():\n    return 1\n"


@pytest.fixture
def pg_node(tmp_path: Path, pg_url: str) -> Iterator[tuple[Node, Store, FakeClock]]:
    path = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    (path / "plugins" / "cz_queue_signal_tasks.py").write_text(TASK)
    (path / "jobs.toml").write_text(
        '[jobs.hello]\n[[jobs.hello.steps]]\nname = "noop"\ntype = "python"\n'
        'callable = "cz_queue_signal_tasks:noop"\nisolation = "thread"\n')
    config_file = path / "cadenza.toml"
    config_file.write_text(config_file.read_text().replace(
        'url = "sqlite:///data/cadenza.db"', f'url = "{pg_url}"'))
    home = Home(path.resolve())
    config = home.load_config()
    clock = FakeClock(START)
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=2, scheduler=False)
    node.start()
    try:
        yield node, store, clock
    finally:
        node.stop(timeout=30)
        store.close()


def test_a_node_runs_a_run_queued_elsewhere_without_waiting_for_its_poll(
        pg_url: str, pg_node: tuple[Node, Store, FakeClock]) -> None:
    """The node's clock never moves, so its once-a-second poll never comes: only the
    signal can wake its dispatcher (without it the run would stay QUEUED)."""
    _node, store, clock = pg_node
    until(lambda: clock.waiting > 0, "the node's loops wait on the clock")
    create_in_another_process(pg_url, "hello")
    (run,) = store.list_runs(job="hello", limit=10)
    until(lambda: store.get_run(run.id).state is RunState.SUCCEEDED,
          "the run queued by another process succeeds", 30.0)
