"""Where each key of a TOML text is written: a small scanner that keeps line numbers.

``tomllib`` gives values but no positions, and tomlkit's positions are not public; this
scanner reads the text once and records, for every key path, the line and column of its
key and of its value:

* table headers ``[a.b]`` and ``[[a.b]]`` (array-of-tables elements are counted, so the
  second ``[[jobs.x.steps]]`` is ``("jobs", "x", "steps", 1)``);
* keys at line start, dotted keys (``a.b = 1``), quoted keys;
* keys inside inline tables and elements of arrays, on one line or many;
* every string form, multi-line ones included.

It never raises: on text it does not understand it skips to the end of the line, so
it can index a file that has syntax errors. Lookups fall back to the nearest located
parent, then to line 1, column 1.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from cadenza.config.problems import KeyPath, PathElem

Pos = tuple[int, int]
_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_NEWLINE = re.compile("\n")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


@dataclass(frozen=True)
class Header:
    """One table header: its line, its resolved path and whether it is ``[[...]]``."""

    line: int
    col: int
    path: KeyPath
    is_array: bool


class PositionIndex:
    """Maps key paths of one TOML text to (line, column), both counting from 1."""

    def __init__(self, text: str) -> None:
        self.keys: dict[KeyPath, Pos] = {}
        self.values: dict[KeyPath, Pos] = {}
        self.headers: list[Header] = []
        #: where a string, array or inline table that never ends was opened
        self.unterminated: Pos | None = None
        _Scanner(text, self).run()

    def key(self, path: KeyPath) -> Pos:
        """Position of the key (or table header) of ``path``, else of its nearest parent."""
        for end in range(len(path), 0, -1):
            pos = self.keys.get(path[:end])
            if pos is not None:
                return pos
        return (1, 1)

    def value(self, path: KeyPath) -> Pos:
        """Position of the value of ``path``, else of its key, else of its nearest parent."""
        pos = self.values.get(path)
        return pos if pos is not None else self.key(path)

    def exact(self, path: KeyPath) -> Pos | None:
        """Position of the key of ``path`` when it is written in the text, else None."""
        return self.keys.get(path)


class _Scanner:
    def __init__(self, text: str, index: PositionIndex) -> None:
        self.text = text
        self.n = len(text)
        self.i = 0
        self.index = index
        self.arrays: dict[KeyPath, int] = {}
        self.table: KeyPath = ()
        self.starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def pos(self, i: int) -> Pos:
        line = bisect.bisect_right(self.starts, i)
        return (line, i - self.starts[line - 1] + 1)

    def run(self) -> None:
        while self.i < self.n:
            start = self.i
            ch = self.text[self.i]
            if ch in " \t\r\n":
                self.i += 1
            elif ch == "#":
                self.skip_line()
            elif ch == "[":
                self.header()
            else:
                self.key_value(self.table)
                self.skip_line()
            if self.i == start:
                self.i += 1

    # -- low-level helpers ---------------------------------------------------------------
    def skip_line(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = self.n if end < 0 else end + 1

    def skip_spaces(self) -> None:
        while self.i < self.n and self.text[self.i] in " \t":
            self.i += 1

    def skip_blank(self) -> None:
        """Spaces, newlines and comments (inside arrays and inline tables)."""
        while self.i < self.n:
            ch = self.text[self.i]
            if ch in " \t\r\n":
                self.i += 1
            elif ch == "#":
                end = self.text.find("\n", self.i)
                self.i = self.n if end < 0 else end
            else:
                return

    def mark(self, table: dict[KeyPath, Pos], path: KeyPath, at: int) -> None:
        if path not in table:
            table[path] = self.pos(at)

    # -- keys ----------------------------------------------------------------------------
    def key(self) -> list[str] | None:
        parts: list[str] = []
        while True:
            self.skip_spaces()
            if self.i >= self.n:
                return None
            ch = self.text[self.i]
            if ch == '"':
                parts.append(self.basic_key())
            elif ch == "'":
                end = self.text.find("'", self.i + 1)
                end = self.n if end < 0 else end
                parts.append(self.text[self.i + 1:end])
                self.i = end + 1
            else:
                start = self.i
                while self.i < self.n and self.text[self.i] in _BARE:
                    self.i += 1
                if self.i == start:
                    return None
                parts.append(self.text[start:self.i])
            self.skip_spaces()
            if self.i < self.n and self.text[self.i] == ".":
                self.i += 1
                continue
            return parts

    def basic_key(self) -> str:
        self.i += 1
        out: list[str] = []
        while self.i < self.n and self.text[self.i] not in '"\n':
            ch = self.text[self.i]
            if ch == "\\" and self.i + 1 < self.n:
                nxt = self.text[self.i + 1]
                width = {"u": 4, "U": 8}.get(nxt, 0)
                if width:
                    digits = self.text[self.i + 2:self.i + 2 + width]
                    try:
                        out.append(chr(int(digits, 16)))
                    except (ValueError, OverflowError):
                        out.append(digits)
                    self.i += 2 + width
                    continue
                out.append(_ESCAPES.get(nxt, nxt))
                self.i += 2
                continue
            out.append(ch)
            self.i += 1
        self.i += 1
        return "".join(out)

    # -- tables --------------------------------------------------------------------------
    def header(self) -> None:
        at = self.i
        is_array = self.text.startswith("[[", self.i)
        self.i += 2 if is_array else 1
        parts = self.key()
        if not parts:
            self.skip_line()
            return
        resolved: list[PathElem] = []
        for k, part in enumerate(parts):
            resolved.append(part)
            here = tuple(resolved)
            last = k == len(parts) - 1
            if last and is_array:
                count = self.arrays.get(here, 0)
                self.arrays[here] = count + 1
                self.mark(self.index.keys, here, at)
                resolved.append(count)
            elif here in self.arrays:
                resolved.append(self.arrays[here] - 1)
            self.mark(self.index.keys, tuple(resolved), at)
        self.table = tuple(resolved)
        line, col = self.pos(at)
        self.index.headers.append(Header(line, col, self.table, is_array))
        self.skip_line()

    def key_value(self, table: KeyPath) -> bool:
        at = self.i
        parts = self.key()
        if not parts:
            return False
        path = table
        for part in parts:
            path = (*path, part)
            self.mark(self.index.keys, path, at)
        self.skip_spaces()
        if self.i >= self.n or self.text[self.i] != "=":
            return False
        self.i += 1
        self.value(path)
        return True

    # -- values --------------------------------------------------------------------------
    def value(self, path: KeyPath) -> None:
        self.skip_spaces()
        if self.i >= self.n:
            return
        self.mark(self.index.values, path, self.i)
        text, i = self.text, self.i
        if text.startswith('"""', i):
            self.multiline(i, '"""', escapes=True)
        elif text.startswith("'''", i):
            self.multiline(i, "'''", escapes=False)
        elif text[i] == '"':
            self.i += 1
            while self.i < self.n and text[self.i] not in '"\n':
                self.i += 2 if text[self.i] == "\\" else 1
            self.i = min(self.i + 1, self.n)
        elif text[i] == "'":
            end = text.find("'", i + 1)
            self.i = self.n if end < 0 else end + 1
        elif text[i] == "[":
            self.array(path)
        elif text[i] == "{":
            self.inline_table(path)
        else:
            while self.i < self.n and text[self.i] not in ",]}#\r\n":
                self.i += 1

    def multiline(self, start: int, quote: str, *, escapes: bool) -> None:
        self.i = start + 3
        while self.i < self.n:
            if escapes and self.text[self.i] == "\\":
                self.i += 2
            elif self.text.startswith(quote, self.i):
                self.i += 3
                for _ in range(2):  # up to two quotes may end the content
                    if self.i < self.n and self.text[self.i] == quote[0]:
                        self.i += 1
                return
            else:
                self.i += 1
        self.index.unterminated = self.pos(start)

    def array(self, path: KeyPath) -> None:
        start = self.i
        self.i += 1
        count = 0
        while True:
            self.skip_blank()
            if self.i >= self.n:
                self.index.unterminated = self.pos(start)
                return
            ch = self.text[self.i]
            if ch == "]":
                self.i += 1
                return
            if ch == ",":
                self.i += 1
                continue
            before = self.i
            self.mark(self.index.keys, (*path, count), self.i)
            self.value((*path, count))
            count += 1
            if self.i == before:
                self.skip_line()
                return

    def inline_table(self, path: KeyPath) -> None:
        start = self.i
        self.i += 1
        while True:
            self.skip_blank()
            if self.i >= self.n:
                self.index.unterminated = self.pos(start)
                return
            ch = self.text[self.i]
            if ch == "}":
                self.i += 1
                return
            if ch == ",":
                self.i += 1
                continue
            before = self.i
            if not self.key_value(path) or self.i == before:
                end = self.text.find("}", self.i)
                newline = self.text.find("\n", self.i)
                stops = [k for k in (end, newline) if k >= 0]
                self.i = min(stops) + 1 if stops else self.n
                return
