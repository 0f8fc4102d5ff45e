"""The ``desktop`` channel on a real D-Bus session bus (a private ``dbus-daemon``) with a
notification server that records what it is asked to show (tests/support/dbus_session.py):
a failing run raises one notification naming the job, the step and the error; a click on
it (the server's ActionInvoked signal) asks the desktop app of the home to open the run's
page; without a session bus the delivery fails with a reason and is retried."""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from notify_home import notify_bench
from tests.support.dbus_session import session_bus

from cadenza.config.schema_settings import DesktopChannel
from cadenza.desktop.instance import Command, DesktopInstance
from cadenza.notify.channels import DeliveryFailed, Message
from cadenza.notify.desktop import DesktopNotices

JOBS = """
[jobs.nightly]
[jobs.nightly.retry]
attempts = 1
[[jobs.nightly.steps]]
name = "load"
type = "python"
callable = "cz_notify_tasks:flip"
op_kwargs = { marker = "MARKER" }
isolation = "thread"
"""

SETTINGS = """
[channels.desk]
type = "desktop"
default = true

[[rules]]
name = "failures-on-the-desktop"
on = ["failed"]
jobs = ["*"]
notify = ["role:ops"]
channel = "desk"
"""


@pytest.fixture
def fresh_notices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A notifier of this test's own (the process keeps one, bound to a bus), closed after."""
    monkeypatch.setattr(DesktopNotices, "_shared", None)
    yield
    if DesktopNotices._shared is not None:
        DesktopNotices._shared.close()
        DesktopNotices._shared = None
    # desktop-notifier has no way to close its D-Bus connection (a node keeps it for its
    # life): let it go here, quietly, rather than in whatever test collects it next.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_a_failing_run_raises_a_desktop_notification_and_a_click_opens_its_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_notices: None) -> None:
    with session_bus(tmp_path) as bus, \
            notify_bench(tmp_path / "h", JOBS.replace("MARKER", (tmp_path / "m").as_posix()),
                         SETTINGS) as bench:
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", bus.address)
        run_id = bench.run("nightly")
        assert bench.store.get_run(run_id).state.value == "FAILED"
        bench.sender.round()
        [shown] = bus.server.shown
        assert shown.app_name == "Cadenza"
        assert shown.summary.startswith("[cadenza] nightly failed")
        assert shown.body == "load: Fatal: first run fails"
        assert "default" in shown.actions  # a click on its body is heard
        [entry] = bench.log(run_id=run_id)
        assert (entry.channel, entry.recipient, entry.state) == ("desk", "desktop:desk",
                                                                 "SENT")
        # The desktop app of the home is running: the click opens the run in its window.
        opened: list[Command] = []
        got = threading.Event()

        def on_command(command: Command) -> None:
            opened.append(command)
            got.set()

        app = DesktopInstance(bench.home)
        assert app.acquire()
        try:
            app.listen(on_command)
            bus.click(shown.id)
            assert got.wait(10), "the click did not reach the desktop app"
        finally:
            app.close()
        assert opened == [Command("open", f"/runs/{run_id}")]


def test_without_a_session_bus_the_delivery_fails_with_its_reason_and_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_notices: None) -> None:
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path / 'no-bus'}")
    channel = DesktopChannel(type="desktop")
    with pytest.raises(DeliveryFailed) as failed:
        DesktopNotices.shared().show(channel, Message("[cadenza] x failed", "x"), None)
    assert not failed.value.permanent
    assert "no desktop session to show it on" in str(failed.value)
    assert "DBUS_SESSION_BUS_ADDRESS" in str(failed.value)
