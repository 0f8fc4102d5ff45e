"""A client that closes ``GET /api/runs/{id}/log?follow=1`` mid-run, on a real uvicorn: the
server's reading ends within a poll (no thread left polling the store for the rest of the
run), nothing is written for it, and the run goes on to succeed (issue 15 item 1)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.web.served import PASSWORD, client, eventually, make_home, served

from cadenza.domain.states import TERMINAL_RUN_STATES, RunState
from cadenza.services.history import HistoryService

JOB = '''
[jobs.slow]
description = "logs three lines, then waits for the test"

[[jobs.slow.steps]]
name = "wait"
type = "python"
callable = "sse_wait:run"
'''
PLUGIN = '''
import threading
from pathlib import Path


def run(ctx=None):
    for i in range(3):
        ctx.log.info("line %s", i)
    release = Path(__file__).resolve().parent.parent / "release"
    pause = threading.Event()
    for _ in range(1200):  # at most a minute
        if release.exists():
            break
        ctx.clock.wait(pause, 0.05)
    ctx.log.info("released")
    return 1
'''


def test_closing_the_stream_mid_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = make_home(tmp_path, jobs=JOB)
    (home / "plugins" / "sse_wait.py").write_text(PLUGIN, encoding="utf-8")
    opened = threading.Event()
    ended = threading.Event()
    real = HistoryService.follow_logs_idle

    def watched(self: HistoryService, *args: Any, **kwargs: Any) -> Iterator[Any]:
        lines = real(self, *args, **kwargs)

        def wrapper() -> Iterator[Any]:
            opened.set()
            try:
                yield from lines
            finally:
                ended.set()  # the server's reading of the log stopped
        return wrapper()

    monkeypatch.setattr(HistoryService, "follow_logs_idle", watched)
    with served(home) as server:
        try:
            _close_mid_run(server, home, opened, ended)
        finally:
            (home / "release").touch()  # never leave the run waiting a minute


def _close_mid_run(server: Any, home: Path, opened: threading.Event,
                   ended: threading.Event) -> None:
    store = server.services.store()
    run_id = store.create_run("slow", "manual")
    eventually(lambda: store.get_run(run_id).state is RunState.RUNNING, "the run started")
    with client(f"http://127.0.0.1:{server.port}") as http:
        login = http.post("/api/login", json={"username": "viewer", "password": PASSWORD})
        assert login.status_code == 200
        data: list[str] = []
        with http.stream("GET", f"/api/runs/{run_id}/log",
                         params={"follow": "1"}) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    data.append(line)
                if '"line 2"' in line:
                    break  # closes the connection mid-run
    assert opened.is_set() and any('"line 0"' in d for d in data), data
    events_at_close = len(store.list_events(run_id=run_id))
    logs_at_close = len(store.list_logs(run_id))
    # the server notices within a poll (0.5 s) while the run still waits, silent
    assert ended.wait(10), "the closed stream still reads the log"
    assert store.get_run(run_id).state is RunState.RUNNING
    assert len(store.list_events(run_id=run_id)) == events_at_close
    assert len(store.list_logs(run_id)) == logs_at_close
    (home / "release").touch()
    finished = eventually(lambda: (r := store.get_run(run_id)) is not None
                          and r.state in TERMINAL_RUN_STATES and r, "the run ended")
    assert finished.state is RunState.SUCCEEDED, finished
    events = store.list_events(run_id=run_id)
    assert not [e for e in events if "viewer" in e.actor or e.event_type == "RUN_CANCELED"]
    assert "released" in [m.message for m in store.list_logs(run_id)]
