"""A throwaway PostgreSQL cluster of a test's own (``initdb`` in a temporary directory, a free
port of 127.0.0.1): a server the test may restart or stop without touching the machine's
PostgreSQL, which the rest of the suite shares.

Debian's server binaries (``/usr/lib/postgresql/*/bin``, or ``pg_config --bindir``); run as
the ``postgres`` user through ``runuser`` when the tests run as root (initdb refuses root).
POSIX only: ``pg_ctl`` and ``runuser``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.tcp_proxy import free_port


def server_binaries() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True)
        candidate = Path(out.stdout.strip())
        if (candidate / "initdb").exists():
            return candidate
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    return None


class PrivatePostgres:
    """One cluster: :attr:`port`, :meth:`url`, :meth:`restart`, :meth:`stop`, :meth:`start`."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        self._prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
        if as_root:
            shutil.chown(root, "postgres")

    def url(self, database: str = "cadenza", port: int | None = None) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{port or self.port}/{database}"

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        self.createdb("cadenza")

    def createdb(self, name: str) -> None:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def restart(self) -> None:
        """A fast restart: every session is ended, the server is back within seconds."""
        self.stop()
        self.start()

    def _run(self, program: str, *args: str, check: bool = True) -> None:
        done = subprocess.run([*self._prefix, str(self.bindir / program), *args],
                              capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stdout[-1000:]}{done.stderr[-1000:]}")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres | None]:
    """A started cluster with a database ``cadenza``, removed afterwards; None when the
    server binaries are missing."""
    bindir = server_binaries()
    if bindir is None:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="cadenza-test-pg-"))
    cluster = PrivatePostgres(bindir, root)
    try:
        cluster.init()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
