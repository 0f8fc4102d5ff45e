"""A small tmpfs for the disk-full tests, a way to fill it, and a read-only remount.

Mounting needs Linux and the CAP_SYS_ADMIN capability (root, outside a locked-down
container). Where the machine cannot mount, the tests are skipped with the reason, under
CI=true too: such a runner cannot run them. Where it should (the capability is there) and
the mount fails all the same, they fail under CI=true and are skipped on a person's
machine, as the other services of the test suite are (tests/conftest.py).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import IN_CI

CAP_SYS_ADMIN = 21


def cannot_mount() -> str | None:
    """Why this machine cannot mount a tmpfs, or None when it should be able to."""
    if not sys.platform.startswith("linux"):
        return f"a tmpfs mount is Linux's ({sys.platform})"
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError as exc:
        return f"cannot read /proc/self/status ({exc})"
    effective = next((line.split()[1] for line in status.splitlines()
                      if line.startswith("CapEff:")), "0")
    if not int(effective, 16) >> CAP_SYS_ADMIN & 1:
        return "mounting a tmpfs needs CAP_SYS_ADMIN (root outside a locked-down container)"
    return None


@contextmanager
def small_tmpfs(path: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (created) until the block ends."""
    why = cannot_mount()
    if why is not None:
        pytest.skip(f"disk-full test needs a small tmpfs: {why}")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                           str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = f"mount -t tmpfs failed although CAP_SYS_ADMIN is held: {done.stderr.strip()}"
        if IN_CI:
            pytest.fail(f"CI=true: {message}")
        pytest.skip(message)
    try:
        yield path
    finally:
        # Lazy: a process of a failed test may still hold a file open in it.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(directory: Path) -> Path:
    """Write a file in ``directory`` until its file system has no byte left; returns it."""
    filler = directory / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * size
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def remount(path: Path, mode: str) -> None:
    """Remount the tmpfs on ``path`` ``ro`` or ``rw``."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True,
                   capture_output=True)
