"""What the tray says, read from a real SQLite store: idle, running N, failed since you last
looked (FAILED, NEEDS_REVIEW and MISSED count; opening the window clears it), paused; its
menu (Open, Pause or Resume, the last five runs, Quit) in English, French and Chinese."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.support.store_helpers import end_run, start_run

from cadenza.clock import FakeClock
from cadenza.desktop.tray import Entry, menu, read_status, tooltip
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.boundary import NewRun
from cadenza.store.desktop import SchedulingPauses
from cadenza.store.fires import NewFire


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    clock = FakeClock("2027-03-01T09:00:00+00:00")
    with Store.open(f"sqlite:///{tmp_path / 'c.db'}", clock=clock) as opened:
        yield opened


def run(store: Store, job: str, to: RunState | None) -> str:
    [run_id] = store.create_runs([NewRun(job, "manual:test")])
    if to is not None:
        start_run(store, run_id)
        if to is not RunState.RUNNING:
            assert end_run(store, run_id, to)
    return run_id


def keys(entries: list[Entry | None]) -> list[str | None]:
    return [e.key if e is not None else None for e in entries]


def test_the_looks_in_order_failed_running_paused_idle(store: Store) -> None:
    clock = store.clock
    looked = clock.now()
    assert read_status(store, looked).look == "idle"
    SchedulingPauses(store).pause("desktop:alice")
    assert read_status(store, looked).look == "paused"
    run(store, "sync", RunState.RUNNING)
    run(store, "sync", RunState.RUNNING)
    status = read_status(store, looked)
    assert (status.look, status.running) == ("running", 2)
    clock.advance(60)  # type: ignore[attr-defined]
    run(store, "load", RunState.FAILED)
    run(store, "report", RunState.NEEDS_REVIEW)
    store.create_fires([NewFire("nightly", "job", clock.now(), state=RunState.MISSED,
                                reason="the server was down")], actor="test")
    status = read_status(store, looked)
    assert (status.look, status.alarming) == ("failed", 3)
    # Opening the window is looking: what failed before it no longer counts.
    assert read_status(store, clock.now() + timedelta(seconds=1)).look == "running"


def test_the_menu_offers_pause_or_resume_and_the_last_five_runs(store: Store) -> None:
    for job in ("a", "b", "c", "d", "e", "f"):
        run(store, job, RunState.SUCCEEDED)
    status = read_status(store, store.clock.now())
    entries = menu(status, "en")
    assert keys(entries)[:5] == ["open", "status", None, "pause", None]
    assert entries[0] is not None and entries[0].default
    runs = [e for e in entries if e is not None and e.key.startswith("run:")]
    assert [e.label.split("  ")[1] for e in runs] == [
        "f — SUCCEEDED", "e — SUCCEEDED", "d — SUCCEEDED", "c — SUCCEEDED", "b — SUCCEEDED"]
    assert keys(entries)[-1] == "quit"
    SchedulingPauses(store).pause("desktop:alice")
    paused = menu(read_status(store, store.clock.now()), "en")
    assert "resume" in keys(paused) and "pause" not in keys(paused)
    assert tooltip(read_status(store, store.clock.now()), "en") == (
        "Cadenza — scheduling paused")


@pytest.mark.parametrize(("lang", "open_label", "quit_label", "state"), [
    ("fr", "Ouvrir Cadenza", "Quitter Cadenza", "échouée"),
    ("zh_Hans", "打开 Cadenza", "退出 Cadenza", "失败"),
])
def test_the_menu_speaks_the_users_language(store: Store, lang: str, open_label: str,
                                            quit_label: str, state: str) -> None:
    looked = store.clock.now()
    store.clock.advance(1)  # type: ignore[attr-defined]
    run(store, "load", RunState.FAILED)
    status = read_status(store, looked)
    labels = [e.label for e in menu(status, lang) if e is not None]
    assert labels[0] == open_label and labels[-1] == quit_label
    assert any(label.endswith(f"load — {state}") for label in labels)
    assert "Cadenza — " in tooltip(status, lang)
    assert "failed since you last looked" not in tooltip(status, lang)
