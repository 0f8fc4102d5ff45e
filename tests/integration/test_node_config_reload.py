"""A node's reload names the jobs that changed, a change of a step's own keys included (a
python step's ``callable``): each step is compared by its own type, not as the base step."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from cadenza.clock import FakeClock
from cadenza.home import Home
from cadenza.node import Node
from cadenza.node.config import WATCH_SECONDS
from cadenza.services import Actor
from cadenza.services.config import init_home
from cadenza.store import Store


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Home, Store, Node, FakeClock]]:
    """The example home, its store and an unstarted node, under a FakeClock."""
    clock = FakeClock("2027-03-10T09:00:00+00:00")
    made = init_home(tmp_path / "home", example=True, actor=Actor("cli", "init"), clock=clock)
    home = Home(made.path)
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=1, scheduler=False, claimer=False)
    try:
        yield home, store, node, clock
    finally:
        node.stop(timeout=10)
        store.close()


def test_a_changed_step_key_of_its_own_type_is_a_changed_job(
        demo: tuple[Home, Store, Node, FakeClock]) -> None:
    home, store, node, _ = demo
    text = home.jobs_file.read_text(encoding="utf-8")
    assert text.count('callable = "demo_tasks:count"') == 1
    home.jobs_file.write_text(text.replace('callable = "demo_tasks:count"',
                                           'callable = "demo_tasks:check_profile"'),
                              encoding="utf-8")
    assert node.holder.reload() is True
    applied = store.list_events(event_type="CONFIG_CHANGED")[-1]
    assert applied.payload == {"added": [], "removed": [], "changed": ["hello"]}


def test_the_files_are_looked_at_every_two_seconds_by_the_dispatchers_loop(
        demo: tuple[Home, Store, Node, FakeClock]) -> None:
    """No thread of its own: the dispatcher's loop calls ``look_at_files`` at each pass; a
    look compares the files' modification times at most every WATCH_SECONDS of the node's
    clock, and a change asks for a reload."""
    home, _, node, clock = demo
    holder = node.holder
    assert holder.look_at_files() is False and holder.take_request() is False
    stamp = home.jobs_file.stat().st_mtime + 5
    os.utime(home.jobs_file, (stamp, stamp))  # saved by hand
    assert holder.look_at_files() is False  # looked less than 2 s ago
    clock.advance(timedelta(seconds=WATCH_SECONDS))
    assert holder.look_at_files() is True and holder.take_request() is True
    clock.advance(timedelta(seconds=WATCH_SECONDS))
    assert holder.look_at_files() is False  # seen already
