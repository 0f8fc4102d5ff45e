"""A helper process spoken to line by line (race tests across real processes)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from typing import IO

import pytest


class LineWorker:
    """Starts ``args``; :meth:`send` writes a line to its stdin, :meth:`answer` reads one
    line of its stdout (failing the test with its stderr if it died); ``quit`` ends it."""

    def __init__(self, args: Sequence[str]) -> None:
        self._stderr: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True, encoding="utf-8",
        )

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            self._stderr.seek(0)
            pytest.fail(f"worker exited {self.proc.returncode}: {self._stderr.read()}")
        return line.strip()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("quit")
        except OSError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()
