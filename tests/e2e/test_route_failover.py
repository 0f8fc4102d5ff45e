"""A job requiring ``egress = 1`` whose route dies during its http step (issue 13):
the route goes FAULT, the run returns to QUEUED without spending an attempt, resumes on
the other route and SUCCEEDS.

Everything is real: a node (scheduler, dispatcher, workers) on a SQLite home, two
tinyproxy processes as the pool's routes (both egressing as "FR" from 127.0.0.2), the
IP-echo server as the target (``/hold`` answers once the test releases it). The test
kills, with SIGKILL, the tinyproxy of the route the run holds while the request waits in
``/hold``.

This needs the leasing of the pools branch (``requires``, the config sync, the claim
hook, FAULT and the re-queue on ResourceFault); until it is merged the test is skipped
with that reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.clock import SystemClock
from cadenza.domain.states import ResourceState, RunState, StepState
from cadenza.home import Home
from cadenza.node import Node
from tests.support.proxies import (
    FR,
    EchoServer,
    echo_fixture,  # noqa: F401
    tinyproxy,
)

pytest.importorskip("cadenza.services.resources",
                    reason="the pools branch (route leasing, issue 13) is not merged")

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str, seconds: float = 60.0) -> T:
    """Poll (real time, bounded) until ``probe`` returns something true."""
    deadline = time.monotonic() + seconds
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling real progress of the node's threads


def test_route_killed_during_http_step_fails_over(tmp_path: Path, echo: EchoServer) -> None:
    with tinyproxy(tmp_path / "a", source=FR) as first, \
            tinyproxy(tmp_path / "b", source=FR) as second:
        proxies = {"fr-1": first, "fr-2": second}
        path = tmp_path / "home"
        assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
        config = path / "cadenza.toml"
        config.write_text(config.read_text() + f'''
[connections.echo]
type = "http"
base_url = "{echo.url('/')}"
allow_private = true

[pools.egress]
kind = "route"
cooldown = "1s"
[[pools.egress.members]]
id = "fr-1"
proxy = "{first.url}"
region = "FR"
[[pools.egress.members]]
id = "fr-2"
proxy = "{second.url}"
region = "FR"
''')
        (path / "jobs.toml").write_text('''
[jobs.fetch]
requires = { egress = 1 }
[jobs.fetch.retry]
attempts = 1
[[jobs.fetch.steps]]
name = "call"
type = "http"
connection = "echo"
path = "/hold"
''')
        home = Home(path.resolve())
        loaded = home.load_config()
        clock = SystemClock()
        store = home.open_store(loaded, clock=clock)
        node = Node(home, loaded, store, clock=clock, workers=2)
        try:
            node.start()
            run_id = store.create_run("fetch", "manual:test")
            node.dispatcher.wake()
            assert echo.wait_held(60), "the http step never reached the target"
            held = eventually(lambda: [r for r in store.list_resources("egress")
                                       if r.lease_owner == run_id], "the run's route")
            (killed,) = held
            proxies[killed.resource_id].kill()  # SIGKILL while the request waits
            echo.release()
            run = eventually(lambda: (r := store.get_run(run_id)) is not None
                             and r.state in (RunState.SUCCEEDED, RunState.FAILED) and r,
                             "the run to end")
            assert run.state is RunState.SUCCEEDED, run
            assert run.attempt == 0  # the resource fault spent no attempt
            steps = store.list_step_runs(run_id)
            # Step rows count executions (as for a deferral); the run spent no attempt.
            assert [(s.attempt, s.state, s.error_class) for s in steps] == [
                (1, StepState.FAILED, "resource"), (2, StepState.SUCCEEDED, None)]
            dead = store.get_resource(killed.resource_id)
            assert dead is not None and dead.state is ResourceState.FAULT
            other = "fr-2" if killed.resource_id == "fr-1" else "fr-1"
            requests = [e.payload for e in store.list_events(run_id=run_id,
                                                             event_type="HTTP_REQUEST")]
            assert [r["route"] for r in requests][-1] == other
            assert requests[-1]["status"] == 200
            faults = [e for e in store.list_events(resource_id=killed.resource_id,
                                                   event_type="RESOURCE_STATE_CHANGED")
                      if e.payload["to"] == "FAULT"]
            assert len(faults) == 1
        finally:
            node.stop(timeout=10)
            store.close()
