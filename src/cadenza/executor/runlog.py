"""The run log as it is being written: lines buffered in memory, stored at step boundaries.

A line is (time, level, step, message). The run's ``log_level`` decides what is kept at the
source: ``WARNING`` keeps warnings and errors, ``INFO`` adds the executor's progress lines
and the steps' ``ctx.log.info``, ``DEBUG`` adds the rendered step configs and the SQL of each
query with its bind parameters. Lines are redacted by the store when they are written, in
the same transaction as the step boundary they belong to (one commit, not one per line);
for a long step the executor also writes what is pending about once a second.

Step code logs through a :class:`StepLogger` (``ctx.log``), which formats like the standard
``logging`` module (``ctx.log.info("loaded %s rows", n)``).

A run's log keeps at most ``max_lines`` lines from step code (``ctx.log``, a child process's
lines; ``[limits].run_log_lines``) per execution of the run: later ones are counted in
:attr:`RunLog.dropped`, not kept, and the tracker writes one line with the count when the
run ends. The executor's own lines (a step started, succeeded or failed, the run's end) are
always kept: there are a handful per step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from cadenza.config.schema_settings import RUN_LOG_LINES
from cadenza.domain.events import Level
from cadenza.domain.texts import MAX_MESSAGE as _MAX_MESSAGE
from cadenza.domain.texts import cut_before_redaction
from cadenza.store.boundary import EventSpec, LogLine

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_RANK = {name: k for k, name in enumerate(LEVELS)}
MAX_MESSAGE = _MAX_MESSAGE
"""Longer messages are cut (with a note) when the store writes them, after redaction, so
one log call cannot bloat the store (:func:`cadenza.domain.texts.cut_redacted`)."""
MAX_BUFFERED = 16 * MAX_MESSAGE
"""Longer messages are cut here already, to bound what a run holds in memory and sends
between processes: at the next blank past this length (never inside a secret without a
blank); the store then cuts what is left of it to MAX_MESSAGE after redaction."""


def level_rank(level: str) -> int:
    """The order of ``level`` (DEBUG < INFO < WARNING < ERROR); :class:`ValueError` if unknown."""
    try:
        return _RANK[level.upper()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}; expected one of "
                         f"{', '.join(LEVELS)}") from None


def format_message(message: object, args: tuple[object, ...]) -> str:
    """``message % args`` as ``logging`` does, never failing: a bad format is shown as is."""
    text = str(message)
    if args:
        try:
            text = text % args
        except (TypeError, ValueError, KeyError):
            text = f"{text} {args!r}"
    if len(text) > MAX_BUFFERED:
        text = cut_before_redaction(text, MAX_BUFFERED, f"... [cut: {len(text)} characters]")
    return text


class RunLog:
    """The pending lines and events of one run (thread-safe).

    ``now`` gives each line its time (the store's clock, so that tests with a fake clock see
    consistent times); ``max_lines`` caps the lines of step code (see the module
    docstring)."""

    def __init__(self, level: str, now: Callable[[], datetime],
                 max_lines: int = RUN_LOG_LINES) -> None:
        self.level = level.upper()
        self.threshold = level_rank(self.level)
        self._now = now
        self._lock = threading.Lock()
        self._lines: list[LogLine] = []
        self._events: list[EventSpec] = []
        self.closed_steps: set[str] = set()
        self.max_lines = max_lines
        self._room = max_lines
        """How many more lines of step code are kept."""
        self.dropped = 0
        """Lines of step code not kept since :meth:`take_dropped` last read the count."""

    def enabled(self, level: str) -> bool:
        """Whether a line of ``level`` is kept at this run's log level."""
        return _RANK.get(level, 0) >= self.threshold

    def add(self, level: str, message: str, step: str | None = None) -> None:
        """Buffer one line if its level is kept (and its step still writes)."""
        if _RANK.get(level, 0) < self.threshold:
            return
        line = LogLine(self._now(), level, step, message)
        with self._lock:
            if step is not None and step in self.closed_steps:
                return  # an abandoned step thread still talking after its deadline
            self._lines.append(line)

    def add_step_line(self, level: str, message: str, step: str | None) -> None:
        """Buffer one line of step code (``ctx.log``): :meth:`add` within the cap."""
        if _RANK.get(level, 0) >= self.threshold:
            self.add_line(LogLine(self._now(), level, step, message))

    def add_line(self, line: LogLine) -> None:
        """Buffer a line made elsewhere (a child process's), keeping its time; within the
        cap of step code's lines."""
        if _RANK.get(line.level, 0) < self.threshold:
            return
        with self._lock:
            if line.step is not None and line.step in self.closed_steps:
                return
            if self._room <= 0:
                self.dropped += 1
                return
            self._room -= 1
            self._lines.append(line)

    def take_dropped(self) -> int:
        """How many lines of step code were dropped since the last call (then 0)."""
        with self._lock:
            dropped, self.dropped = self.dropped, 0
        return dropped

    def event(self, spec: EventSpec, step: str | None = None) -> None:
        """Buffer one audit event (written with the next boundary)."""
        with self._lock:
            if step is not None and step in self.closed_steps:
                return
            self._events.append(spec)

    def close_step(self, step: str) -> None:
        """Ignore whatever ``step`` still logs from now on (its thread was abandoned)."""
        with self._lock:
            self.closed_steps.add(step)

    def pending(self) -> bool:
        """True when lines or events wait to be written."""
        with self._lock:
            return bool(self._lines or self._events)

    def take(self) -> tuple[list[LogLine], list[EventSpec]]:
        """The pending lines and events, removed from the buffer."""
        with self._lock:
            lines, self._lines = self._lines, []
            events, self._events = self._events, []
        return lines, events

    def restore(self, lines: Sequence[LogLine], events: Sequence[EventSpec]) -> None:
        """Put back what :meth:`take` returned (its write failed), ahead of newer lines."""
        with self._lock:
            self._lines[:0] = lines
            self._events[:0] = events

    def logger(self, step: str | None) -> StepLogger:
        """A ``ctx.log`` for ``step`` (``None``: the run itself)."""
        return StepLogger(self, step)


class StepLogger:
    """``ctx.log``: debug / info / warning / error lines to the run log, tagged with the step."""

    def __init__(self, log: RunLog, step: str | None) -> None:
        self._log = log
        self.step = step

    def _emit(self, level: str, message: object, args: tuple[object, ...]) -> None:
        if self._log.enabled(level):
            self._log.add_step_line(level, format_message(message, args), self.step)

    def debug(self, message: str, *args: object) -> None:
        """A DEBUG line (kept only when the run's log level is DEBUG)."""
        self._emit(Level.DEBUG.value, message, args)

    def info(self, message: str, *args: object) -> None:
        """An INFO line (kept at INFO and DEBUG)."""
        self._emit(Level.INFO.value, message, args)

    def warning(self, message: str, *args: object) -> None:
        """A WARNING line (always kept)."""
        self._emit(Level.WARNING.value, message, args)

    def error(self, message: str, *args: object) -> None:
        """An ERROR line (always kept)."""
        self._emit(Level.ERROR.value, message, args)

    def exception(self, message: str, *args: object) -> None:
        """An ERROR line followed by the current exception's traceback."""
        import traceback

        self._emit(Level.ERROR.value, f"{format_message(message, args)}\n"
                   f"{traceback.format_exc().rstrip()}", ())

    def isEnabledFor(self, level: int | str) -> bool:
        """Whether a line of ``level`` would be kept (names or ``logging`` numbers)."""
        if isinstance(level, int):
            name = {10: "DEBUG", 20: "INFO", 30: "WARNING"}.get(level, "ERROR")
        else:
            name = level.upper()
        return self._log.enabled(name)

    def __repr__(self) -> str:
        return f"StepLogger(step={self.step!r}, level={self._log.level})"


class SendingLog(RunLog):
    """The log of a step running in a child process: kept lines are sent to the parent as
    ``("log", ts, level, message)`` through ``send`` instead of being buffered."""

    def __init__(self, level: str, send: Callable[[Any], None],
                 now: Callable[[], datetime]) -> None:
        super().__init__(level, now)
        self._send = send

    def add(self, level: str, message: str, step: str | None = None) -> None:
        if _RANK.get(level, 0) >= self.threshold:
            self._send(("log", self._now(), level, message))

    def add_step_line(self, level: str, message: str, step: str | None) -> None:
        # The parent applies the cap (its add_line): it knows the run's whole count.
        self.add(level, message, step)
