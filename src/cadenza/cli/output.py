"""How the CLI prints: tables for people, JSON for machines, errors on stderr.

Nothing from outside reaches the terminal as it is (docs/security.md, "What reaches a
terminal"):

* every string the two consoles render (``out.print(str)``, a table's cells) loses its
  control characters (:func:`~cadenza.audit.terminal.printable`), and rich markup and
  emoji codes are off unless a call asks for markup: ``[link=...]`` or ``[reverse]`` in a
  job's description is shown as written;
* :func:`shown` also passes text through the home's redactor (:func:`use_redactor`):
  renderers call it on outside text (errors, reasons, log lines, descriptions, events), and
  table cells and error messages go through it here;
* :func:`guarded_streams` makes ``sys.stdout`` and ``sys.stderr`` redact and neutralise
  what other code prints (a thread-isolated step) while the consoles keep writing to the
  terminal itself;
* JSON escapes every control character (C1 and the bidirectional controls too).
"""

from __future__ import annotations

import functools
import io
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cadenza.services.terminal import printable, sanitized_std_streams

if TYPE_CHECKING:
    from cadenza.services.terminal import Redactor


class _Discard(io.StringIO):
    """Where a console writes when the process has no such stream (``pythonw`` on Windows
    starts with ``sys.stdout`` None)."""

    def write(self, text: str) -> int:
        return len(text)


class SafeConsole(Console):
    """A console whose rendered strings lose their control characters (markup, emoji
    codes and highlighting are off by default).

    Its stream is ``sys.stdout`` (``sys.stderr`` for ``stderr=True``) looked up at each
    write, as a plain rich console does, unless :attr:`pinned` names another one;
    :func:`guarded_streams` pins the real streams for a while. The ``file`` property is
    rich's public way to choose the stream; it is overridden here so that un-pinning
    returns to following ``sys.stdout`` (which pytest and the service layer swap)."""

    def __init__(self, *args: Any, file: IO[str] | None = None, **kwargs: Any) -> None:
        self.pinned: IO[str] | None = file  # before rich's constructor, which reads it
        super().__init__(*args, **kwargs)

    @property
    def file(self) -> IO[str]:
        stream = self.pinned or (sys.stderr if self.stderr else sys.stdout)
        # a live display swaps sys.stdout for a proxy that names the real stream here
        stream = getattr(stream, "rich_proxied_file", stream)
        return stream if stream is not None else _DISCARD

    @file.setter
    def file(self, new_file: IO[str]) -> None:
        self.pinned = new_file

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)


_DISCARD = _Discard()
out = SafeConsole(highlight=False, soft_wrap=True, markup=False, emoji=False)
err = SafeConsole(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)

_redactor_source: Callable[[], Redactor | None] | None = None


def use_redactor(source: Callable[[], Redactor | None] | None) -> None:
    """Where :func:`shown` gets the home's redactor from (called when it is first needed:
    a command that prints nothing from outside never reads the secrets); None: no home."""
    global _redactor_source
    _redactor_source = source


def current_redactor() -> Redactor:
    """The home's redactor if a home is open (see :func:`use_redactor`), else one with the
    store's rules and no known value."""
    redactor = None
    if _redactor_source is not None:
        try:
            redactor = _redactor_source()
        except Exception:  # secrets that cannot be read: their values are unknown here too
            redactor = None
    return redactor if redactor is not None else _plain_redactor()


def shown(value: object) -> str:
    """``value`` as text fit for a terminal: redacted by the home's redactor (the rules of
    the store, even where no secret is registered), then without control characters."""
    text = "" if value is None else str(value)
    return printable(current_redactor().redact_text(text))


@functools.cache
def _plain_redactor() -> Redactor:
    """The store's rules without known values (no home is open)."""
    from cadenza.services.terminal import Redactor

    return Redactor()


@contextmanager
def guarded_streams() -> Iterator[None]:
    """While inside, what other code writes on ``sys.stdout``/``sys.stderr`` is redacted
    and neutralised; the two consoles write to the real streams (their own output keeps its
    styles and a live display its cursor moves)."""
    saved = (out.pinned, err.pinned)
    with sanitized_std_streams(current_redactor()) as (real_out, real_err):
        out.pinned, err.pinned = real_out, real_err
        try:
            yield
        finally:
            out.pinned, err.pinned = saved


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    return str(value)


#: Control characters JSON leaves raw with ``ensure_ascii=False`` (DEL, C1, bidi controls);
#: written as JSON ``\\u`` escapes of four hex digits, which is still the same JSON string.
_JSON_RAW_CONTROLS = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *range(0x202A, 0x202F),
                                                  *range(0x2066, 0x206A))}


def print_json(value: Any) -> None:
    """Machine output: one JSON document on stdout (no raw control character in it)."""
    text = json.dumps(value, default=_default, indent=2, ensure_ascii=False)
    sys.stdout.write(text.translate(_JSON_RAW_CONTROLS) + "\n")
    sys.stdout.flush()


def print_table(
    rows: Iterable[Mapping[str, Any]], columns: Sequence[str], title: str | None = None
) -> None:
    """People output: a table with the given columns (missing values print empty).

    On a terminal, a rich table; piped, one tab-separated line per row under a header line,
    never wrapped or truncated, so that ``grep`` and ``cut`` work on it.
    """
    if not out.is_terminal:
        lines = ["\t".join(columns)]
        lines += ["\t".join(shown(_cell(row.get(c))).replace("\t", " ").replace("\n", " ")
                            for c in columns) for row in rows]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        return
    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[Text(shown(_cell(row.get(c)))) for c in columns])
    out.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(str(v) for v in value)
    return str(value)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``message`` (redacted, without control characters) on stderr and exit with
    ``code``."""
    err.print(f"error: {shown(message)}", markup=False)
    raise typer.Exit(code)
