"""The node's probe of its home's ``data/`` (cadenza/node/local_disk.py): a full disk makes
the node degraded with the disk named and holds its claims back; a disk that takes writes
again clears it after the settle time; an error that is no write failure is not one."""

from __future__ import annotations

import errno
import logging
import os
from contextlib import ExitStack
from pathlib import Path

import pytest

from cadenza.clock import FakeClock
from cadenza.lifecycle import Lifecycle
from cadenza.node.local_disk import PROBE_PREFIX, SETTLE_SECONDS, LocalDisk, write_probe


class Disk:
    """A probe that raises ``error`` while it is set."""

    def __init__(self) -> None:
        self.error: OSError | None = None

    def __call__(self, directory: Path) -> None:
        if self.error is not None:
            raise self.error


def test_a_full_disk_is_degraded_until_it_takes_writes_again_for_the_settle_time(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock("2027-01-01T00:00:00+00:00")
    disk = Disk()
    watch = LocalDisk(tmp_path, Lifecycle(clock), probe=disk)
    assert watch.check() is None and watch.failing is None

    disk.error = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.INFO, logger="cadenza.node"):
        failure = watch.check()
        clock.advance(5)
        assert watch.check() == watch.failing
    assert failure is not None
    assert failure.reason == ("disk full: No space left on device "
                              f"(since 2027-01-01T00:00:00+00:00; {tmp_path})")
    assert watch.failing is not None and watch.failing.reason == failure.reason  # "since" kept
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said  # once, not at every probe
    assert said[0].startswith(f"the data directory {tmp_path} cannot be written: disk full "
                              "(No space left on device); this node answers degraded and "
                              "takes no new runs until it can")
    assert said[0].endswith(f"free space on the disk of {tmp_path}")

    disk.error = None
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cadenza.node"):
        clock.advance(SETTLE_SECONDS - 6)  # the last failure was 5 s after the first
        assert watch.check() is not None  # a write worked, but the failure is recent
        clock.advance(6)
        assert watch.check() is None and watch.failing is None
    assert [r.getMessage() for r in caplog.records] == [
        f"the data directory {tmp_path} takes writes again (disk full since "
        "2027-01-01T00:00:00+00:00): this node takes runs again"]


def test_a_read_only_disk_says_so_and_other_errors_are_not_write_failures(
        tmp_path: Path) -> None:
    disk = Disk()
    watch = LocalDisk(tmp_path, Lifecycle(FakeClock("2027-01-01T00:00:00+00:00")), probe=disk)
    disk.error = OSError(errno.ENOENT, "No such file or directory")
    assert watch.check() is None
    disk.error = OSError(errno.EROFS, "Read-only file system")
    failure = watch.check()
    assert failure is not None and failure.reason.startswith("read-only: Read-only file system")
    missing = LocalDisk(tmp_path / "none", Lifecycle(FakeClock("2027-01-01T00:00:00+00:00")),
                        probe=disk)
    assert missing.check() is None  # no data/ yet: nothing written there, nothing probed


def test_the_probe_leaves_no_file(tmp_path: Path) -> None:
    write_probe(tmp_path)
    assert [p for p in tmp_path.iterdir() if p.name.startswith(PROBE_PREFIX)] == []
    assert not (tmp_path / f"{PROBE_PREFIX}{os.getpid()}").exists()


class Counting(Disk):
    """A probe that counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __call__(self, directory: Path) -> None:
        self.calls += 1
        super().__call__(directory)


def test_an_idle_node_probes_seldom_and_a_question_gets_a_fresh_answer(tmp_path: Path) -> None:
    """While the node holds no run its disk is probed every IDLE_PROBE_SECONDS (an idle
    node's CPU is its wake-ups); whoever asks (the dispatcher before a claim, the health
    page) gets an answer from a probe at most PROBE_SECONDS old, probed then if need be;
    once the node holds runs the loop probes every PROBE_SECONDS."""
    clock = FakeClock("2027-01-01T00:00:00+00:00")
    life = Lifecycle(clock)
    disk = Counting()
    busy = False
    watch = LocalDisk(tmp_path, life, probe=disk, busy=lambda: busy)
    stack = ExitStack()
    watch.start(stack)
    try:
        assert disk.calls == 1 and clock.wait_until_idle(1)
        for _ in range(9):
            clock.advance_idle(1, 1)
        assert disk.calls == 1  # idle: no probe for 9 s
        clock.advance_idle(1, 1)
        assert disk.calls == 2  # the tenth second's

        clock.advance_idle(3, 1)
        disk.error = OSError(errno.ENOSPC, "No space left on device")
        failure = watch.current()  # 3 s old: probed now, the disk found full
        assert disk.calls == 3 and failure is not None and failure.kind == "disk full"
        assert watch.current() is failure and disk.calls == 3  # fresh: no second probe
        disk.error = None

        busy = True  # the question woke the loop, which now paces by the node's runs
        assert clock.wait_until_idle(1)
        for _ in range(3):
            clock.advance_idle(2, 1)
        assert disk.calls == 6  # every 2 s while the node holds runs
        assert watch.current() is failure and disk.calls == 6  # the loop's probes are fresh
        busy = False  # the last probe was when the node still held runs
        for _ in range(4):
            clock.advance_idle(2, 1)
        assert disk.calls == 6  # idle: no probe 8 s after the last
        clock.advance_idle(2, 1)
        assert disk.calls == 7  # but 10 s after it
    finally:
        life.stop()
        stack.close()
