"""What may reach a terminal: outside text made inert, and streams that redact as they write.

Text that comes from outside (HTTP bodies, exception messages, job descriptions, log lines,
a step's own output) can carry control characters that a terminal obeys: ``ESC [2J`` clears
the screen, ``ESC ]0;title BEL`` retitles the window, ``CR`` or ``ESC [1A`` overwrite what was
printed to fake a result, and the bidirectional overrides (U+202E ...) reorder what is shown.
:func:`printable` turns each of those characters into a visible escape (``\\x1b``, ``\\r``,
``\\u202e``), so that the text is shown, never obeyed. Newline and tab are kept; a CR
before a newline (Windows line ends) is dropped.

:class:`LineSanitizer` applies a :class:`~cadenza.audit.redact.Redactor` and then
:func:`printable` to a stream of text, a whole number of lines at a time (a secret cut in the
middle by two ``write`` calls is still found). :class:`SanitizingStream` is a text stream
over another one that does this; :func:`sanitized_std_streams` puts such streams in place of
``sys.stdout`` and ``sys.stderr`` for a while, so that whatever code prints there (a
thread-isolated step, a library, a warning) is redacted like the store.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from cadenza.audit.redact import Redactor

#: Characters a terminal may obey: C0 but tab and newline, DEL, C1, and the bidirectional
#: embeddings, overrides and isolates (the marks U+200E/U+200F only affect neutral
#: characters next to them and stay).
_CONTROLS = (
    [c for c in range(0x20) if c not in (0x09, 0x0A)]
    + list(range(0x7F, 0xA0))
    + list(range(0x202A, 0x202F))
    + list(range(0x2066, 0x206A))
)
_VISIBLE: dict[int, str] = {
    c: (f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}") for c in _CONTROLS
}
_VISIBLE[0x0D] = "\\r"

#: Text waiting for its end of line is written anyway past this many characters.
MAX_PENDING = 1 << 20


def printable(text: str) -> str:
    """``text`` with every control character a terminal could obey written as a visible
    escape (``ESC`` becomes ``\\x1b``); newline and tab stay, ``CR LF`` becomes ``LF``."""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_VISIBLE)


def has_controls(text: str) -> bool:
    """Whether :func:`printable` would change ``text`` (other than a ``CR LF``)."""
    return any(ord(c) in _VISIBLE for c in text)


class LineSanitizer:
    """Redacts and neutralises text fed in pieces, a whole number of lines at a time.

    :meth:`feed` returns what can be shown now (every complete line so far), :meth:`flush`
    the rest. Without a redactor, only :func:`printable` applies. Thread-safe.
    """

    def __init__(self, redactor: Redactor | None) -> None:
        self.redactor = redactor
        self._pending = ""
        self._lock = threading.Lock()

    def _clean(self, text: str) -> str:
        if self.redactor is not None:
            text = self.redactor.redact_text(text)
        return printable(text)

    def feed(self, text: str) -> str:
        """The sanitised complete lines of what was fed so far (``""`` if none)."""
        with self._lock:
            text = self._pending + text
            cut = text.rfind("\n") + 1
            if cut == 0 and len(text) > MAX_PENDING:
                cut = len(text)
            self._pending = text[cut:]
            return self._clean(text[:cut]) if cut else ""

    def flush(self) -> str:
        """The sanitised rest (a line without its end yet)."""
        with self._lock:
            text, self._pending = self._pending, ""
            return self._clean(text) if text else ""


class SanitizingStream(io.TextIOBase):
    """A text stream that redacts and neutralises what is written, line by line, before
    passing it to ``target`` (a text stream, or a function that takes the text).

    Complete lines go through at once; a line without its end waits for it or for
    :meth:`flush` (``print(..., flush=True)``, or the end of the program).
    """

    def __init__(self, target: TextIO | Callable[[str], object], redactor: Redactor | None,
                 ) -> None:
        super().__init__()
        self.target = target
        self.sanitizer = LineSanitizer(redactor)

    def _emit(self, text: str) -> None:
        if not text:
            return
        if callable(self.target):
            self.target(text)
        else:
            self.target.write(text)

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._emit(self.sanitizer.feed(text))
        return len(text)

    def flush(self) -> None:
        self._emit(self.sanitizer.flush())
        flush = getattr(self.target, "flush", None)
        if flush is not None:
            flush()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        """The target's descriptor (for code that needs one, such as ``faulthandler``:
        what is written there directly is not redacted)."""
        fileno = getattr(self.target, "fileno", None)
        if fileno is None:
            raise io.UnsupportedOperation("fileno")
        return int(fileno())

    def isatty(self) -> bool:
        isatty = getattr(self.target, "isatty", None)
        return bool(isatty()) if isatty is not None else False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.target, "encoding", None) or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.target, "errors", None)


@contextmanager
def sanitized_std_streams(redactor: Redactor | None) -> Iterator[tuple[TextIO, TextIO]]:
    """While inside, ``sys.stdout`` and ``sys.stderr`` redact and neutralise what is
    written to them; yields the streams they replaced (for output of our own that must
    reach the terminal as it is, such as a live display). Restored on exit, after a flush.
    """
    real_out, real_err = sys.stdout, sys.stderr
    guarded_out = SanitizingStream(real_out, redactor)
    guarded_err = SanitizingStream(real_err, redactor)
    sys.stdout, sys.stderr = guarded_out, guarded_err
    try:
        yield real_out, real_err
    finally:
        for stream in (guarded_out, guarded_err):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # the terminal went away: nothing more can be shown
        if sys.stdout is guarded_out:
            sys.stdout = real_out
        if sys.stderr is guarded_err:
            sys.stderr = real_err
