"""A step child's own stdout and stderr, redacted and made inert before they reach a terminal.

A process-isolated step (:mod:`cadenza.executor.child`) inherits the standard output and
error of ``cadenza run`` or ``cadenza serve``: whatever it prints, and whatever a program it
starts prints, would reach the user's terminal or the server's log file as it is. At its
start the child therefore puts a pipe in place of its file descriptors 1 and 2 (``dup2``, so
Python's ``print``, C extensions and the processes it starts all write into it), and a
thread copies the pipe's text to the original descriptors through the home's
:class:`~cadenza.audit.redact.Redactor` and :func:`~cadenza.audit.terminal.printable`, a
whole number of lines at a time.

The redactor is built from the home's secret store on the first output (a step that prints
nothing does not pay for it): the same values the parent's redactor knows. If the secrets
cannot be read, the output is withheld, with one line saying so.
"""

from __future__ import annotations

import codecs
import io
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from cadenza.clock import SystemClock

if TYPE_CHECKING:
    from cadenza.audit.redact import Redactor
    from cadenza.audit.terminal import LineSanitizer

DRAIN_SECONDS = 1.0
"""How long the end of the step waits, at most, for its last output to be copied (a
process the step started may hold the pipe open: its end is then never seen)."""
_CHUNK = 65536
_REAL = SystemClock()
"""The drain waits for the operating system, in real time."""


class ChildOutput:
    """The redirection of one child's descriptors 1 and 2 (see the module docstring)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._redactor: Redactor | None = None
        self._failed: str | None = None
        self._lock = threading.Lock()
        self._pumps: list[tuple[int, int, threading.Thread]] = []  # fd, saved fd, thread
        self._streams: list[tuple[str, TextIO | None]] = []  # sys attribute, original

    def redactor(self) -> Redactor | None:
        """The home's redactor (built once), or None when the secrets cannot be read."""
        with self._lock:
            if self._redactor is None and self._failed is None:
                try:
                    from cadenza.home import Home

                    self._redactor = Home(self.home).redactor
                except Exception as exc:  # any failure: nothing unmasked is shown
                    self._failed = f"{type(exc).__name__}: {exc}"
            return self._redactor

    def start(self) -> ChildOutput:
        """Put a pipe in place of descriptors 1 and 2 and start copying; returns itself."""
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        for fd in (1, 2):
            try:
                saved = os.dup(fd)
            except OSError:
                continue  # not open (a GUI interpreter on Windows): nothing to guard
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            thread = threading.Thread(target=self._pump, args=(read_end, saved),
                                      name=f"cadenza-output-{fd}", daemon=True)
            thread.start()
            self._pumps.append((fd, saved, thread))
            # A stream that writes to the console itself (Windows) would not see the dup2:
            # Python's own stream is reopened on the descriptor.
            name = "stdout" if fd == 1 else "stderr"
            self._streams.append((name, getattr(sys, name)))
            setattr(sys, name, io.TextIOWrapper(
                io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                errors="backslashreplace", line_buffering=True))
        return self

    def _pump(self, read_end: int, saved: int) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        sanitizer: LineSanitizer | None = None
        try:
            while True:
                data = os.read(read_end, _CHUNK)
                text = decoder.decode(data, final=not data)
                if text:
                    if sanitizer is None:
                        sanitizer = self._sanitizer(saved)
                    shown = sanitizer.feed(text)
                    if shown and self._failed is None:
                        _write(saved, shown)
                if not data:
                    if sanitizer is not None and self._failed is None:
                        _write(saved, sanitizer.flush())
                    return
        except OSError:
            return  # the terminal went away: nothing more can be shown
        finally:
            os.close(read_end)

    def _sanitizer(self, saved: int) -> LineSanitizer:
        # Imported on the first output: a step that prints nothing starts without them.
        from cadenza.audit.terminal import LineSanitizer

        redactor = self.redactor()
        if redactor is None:
            _write(saved, "cadenza: this step's output is withheld: the secrets to mask in "
                          f"it could not be read ({self._failed})\n")
        return LineSanitizer(redactor)

    def close(self) -> None:
        """Put the original descriptors back and wait (briefly) for the last output."""
        for name, original in self._streams:
            _flush(getattr(sys, name))
            setattr(sys, name, original)
        self._streams = []
        for fd, saved, _ in self._pumps:
            try:
                os.dup2(saved, fd)  # closes our write end: the pump sees the end
            except OSError:
                pass
        deadline = _REAL.monotonic() + DRAIN_SECONDS
        for _, saved, thread in self._pumps:
            thread.join(max(0.0, deadline - _REAL.monotonic()))
            if not thread.is_alive():
                os.close(saved)
        self._pumps = []


def guard_output(home: Path) -> ChildOutput:
    """Start redacting this process's descriptors 1 and 2 (see the module docstring)."""
    return ChildOutput(home).start()


def _flush(stream: object) -> None:
    flush = getattr(stream, "flush", None)
    if flush is not None:
        try:
            flush()
        except (OSError, ValueError):
            pass


def _write(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        written = os.write(fd, data)
        data = data[written:]
