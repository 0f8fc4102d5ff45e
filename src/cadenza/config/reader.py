"""Reading one configuration file: bytes → text → values, with every problem located.

Bad input never raises: a file that is too big, empty, not UTF-8 or holds NUL bytes gives
one problem at the spot. A TOML syntax error does not hide the file's other problems:
the offending line is blanked (for a table declared twice, that table's whole section)
and the text parsed again, up to :data:`MAX_RECOVERIES` times, so that the rest of the
file is still validated. Blanking keeps line numbers, so every later position is right.

Choices: a UTF-8 byte order mark is accepted (and kept by the writer); CRLF line endings
work; a 0-byte file is an error, because an empty ``jobs.toml`` is far more likely a file
truncated by a failed copy than a wish to have no jobs (write a comment to mean "empty").
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadenza.config.locate import PositionIndex
from cadenza.config.problems import Problem, Reporter, format_path

MAX_BYTES = 2 * 1024 * 1024
MAX_RECOVERIES = 100
RECOVERY_BUDGET = 10_000_000  # characters parsed again, at most, while recovering
BOM = "\ufeff"

_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_AT_END = re.compile(r"\s*\(at end of document\)$")
_DECLARED_TWICE = re.compile(r"^Cannot declare (\(.*\)) twice$")
_KEY_AT_LINE = re.compile(r"^\s*([^=#\[]+?)\s*=")
_INLINE_TWICE = re.compile(r"^Duplicate inline table key '(.*)'$")
_HINTS = {
    "Cannot overwrite a value": "duplicate key: this key is already set in this table",
    "Illegal character '\\n'": "unterminated string: expected a closing quote on this line",
    "Unterminated string": "unterminated string: expected its closing quotes",
    "Invalid statement": "invalid statement: expected `key = value`, a [table] header "
                         "or a # comment",
    "Unclosed array": "unclosed array: expected ',' or ']'",
    "Unclosed inline table": "unclosed inline table: expected ',' or '}' on the same line",
    'Expected "\'\'\'"': "unterminated string: expected its closing quotes",
    "Invalid value": "invalid value: expected a string, number, boolean, date, array or "
                     "inline table",
}


@dataclass
class ParsedFile:
    """One file after reading: values (or None), the indexed text and the problems so far."""

    name: str
    text: str
    data: dict[str, Any] | None
    index: PositionIndex
    reporter: Reporter
    blanked: set[int] = field(default_factory=set)
    had_bom: bool = False

    @property
    def problems(self) -> list[Problem]:
        """Every problem reported on this file so far."""
        return self.reporter.problems


def read_file(path: Path, name: str) -> ParsedFile:
    """Read and parse ``path``; a missing or unreadable file becomes a problem."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return _failed(name, f"file is {size / 1048576:.1f} MiB; the limit is 2 MiB "
                                 "(expected a configuration file, not data)")
        raw = path.read_bytes()
    except FileNotFoundError:
        return _failed(name, f"file not found: expected {name} in {path.parent} "
                             "(create it with `cadenza init`)")
    except OSError as exc:
        return _failed(name, f"cannot read the file: {exc.strerror or exc}")
    return parse_bytes(raw, name)


def parse_bytes(raw: bytes, name: str) -> ParsedFile:
    """Decode ``raw`` (checking size, emptiness, NULs and UTF-8) and parse it."""
    text, problem = decode(raw, name)
    if text is None:
        return _failed(name, problem.message if problem else "unreadable", problem)
    parsed = parse_text(text, name)
    parsed.had_bom = raw.startswith(b"\xef\xbb\xbf")
    return parsed


def decode(raw: bytes, name: str) -> tuple[str | None, Problem | None]:
    """The text of ``raw``, or None and the one problem that makes it unreadable."""
    if len(raw) > MAX_BYTES:
        return None, Problem(name, 1, 1, f"file is {len(raw) / 1048576:.1f} MiB; the limit "
                                         "is 2 MiB (expected a configuration file)")
    if not raw:
        return None, Problem(name, 1, 1, "file is empty (0 bytes): it may have been truncated; "
                                         "expected TOML text (a comment is enough to mean "
                                         "'nothing here')")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None, Problem(name, 1, 1, "file is UTF-16: expected UTF-8 text; save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        line, col = _byte_position(raw, nul)
        return None, Problem(name, line, col, "file contains a NUL byte: expected UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _byte_position(raw, exc.start)
        return None, Problem(name, line, col, f"file is not valid UTF-8 (byte "
                                              f"0x{raw[exc.start]:02x}): save it as UTF-8")
    return text.removeprefix(BOM), None


def parse_text(text: str, name: str) -> ParsedFile:
    """Parse TOML ``text``, recovering from syntax errors so the rest can be validated."""
    text = text.removeprefix(BOM)
    reporter = Reporter(name)
    lines = text.split("\n")
    blanked: set[int] = set()
    data: dict[str, Any] | None = None
    # Each recovery parses the whole text again: bound the total work on big files.
    tries = max(10, min(MAX_RECOVERIES, RECOVERY_BUDGET // max(len(text), 1)))
    for _ in range(tries):
        current = "\n".join(lines)
        try:
            data = tomllib.loads(current)
            break
        except tomllib.TOMLDecodeError as exc:
            if not _recover(str(exc), lines, blanked, reporter):
                break
    else:
        reporter.at(1, 1, f"more than {tries} syntax errors; fix the ones reported first")
    recovered = "\n".join(lines)
    index = PositionIndex(recovered)
    reporter.index = index
    return ParsedFile(name, recovered, data, index, reporter, blanked)


def _recover(message: str, lines: list[str], blanked: set[int], reporter: Reporter) -> bool:
    """Report one syntax error and blank what caused it; False when nothing can be blanked."""
    at = _AT.search(message)
    text = _AT.sub("", _AT_END.sub("", message))
    if at is None:  # "at end of document": something was opened and never closed
        opened = PositionIndex("\n".join(lines)).unterminated
        line, col = opened if opened else (_last_content_line(lines), 1)
        reporter.at(line, col, _HINTS.get(text, f"syntax error: {text}"))
        changed = [_blank(lines, k, blanked) for k in range(line - 1, len(lines))]
        return any(changed)
    line, col = int(at.group(1)), int(at.group(2))
    twice = _DECLARED_TWICE.match(text)
    if twice:
        index = PositionIndex("\n".join(lines))
        return _drop_section(twice.group(1), line, lines, blanked, index, reporter)
    opened = PositionIndex("\n".join(lines)).unterminated if text.startswith("Unclosed") \
        else None
    if opened and opened[0] < line:
        # An array or inline table left open on an earlier line swallowed the lines since.
        reporter.at(opened[0], opened[1], _HINTS.get(text, f"syntax error: {text}"))
        return any([_blank(lines, k, blanked) for k in range(opened[0] - 1, line - 1)])
    k = line - 1
    if k >= len(lines) or not lines[k].strip():
        # The error is a consequence of an earlier blanking; blank upwards silently.
        k = min(k, len(lines) - 1)
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k < 0:
            return False
        _blank(lines, k, blanked)
        return True
    hint = _HINTS.get(text, f"syntax error: {text}")
    if text == "Cannot overwrite a value":
        key = _KEY_AT_LINE.match(lines[k])
        if key:
            name = key.group(1).strip()
            first = _first_setting(lines, k, name)
            where = f" (first set at line {first})" if first is not None else ""
            hint = f"duplicate key {name!r}{where}: a key may be set only once per table"
            col = lines[k].index(key.group(1)) + 1
    inline = _INLINE_TWICE.match(text)
    if inline:
        name = inline.group(1)
        hint = f"duplicate key {name!r} in an inline table: a key may be set only once per table"
        # tomllib points past the value; point at the second key instead.
        keys = [m.start() for m in re.finditer(rf"(?<![\w-]){re.escape(name)}\s*=", lines[k])
                if m.start() < col - 1]
        if len(keys) >= 2:
            col = keys[-1] + 1
    reporter.at(line, col, hint)
    if lines[k].lstrip().startswith("["):
        # A broken table header: drop its whole section, or its keys would land in the
        # table above and be reported there as errors they are not.
        end = next((j for j in range(k + 1, len(lines)) if lines[j].lstrip().startswith("[")),
                   len(lines))
        for j in range(k, end):
            _blank(lines, j, blanked)
        return True
    _blank(lines, k, blanked)
    return True


def _first_setting(lines: list[str], k: int, name: str) -> int | None:
    """The 1-based line of the first ``name = ...`` of the table holding line ``k + 1``
    (searched upwards to the table's header), or None."""
    first = None
    for j in range(k - 1, -1, -1):
        line = lines[j].lstrip()
        if line.startswith("["):
            break
        found = _KEY_AT_LINE.match(lines[j])
        if found and found.group(1).strip() == name:
            first = j + 1
    return first


def _drop_section(path_text: str, line: int, lines: list[str], blanked: set[int],
                  index: PositionIndex, reporter: Reporter) -> bool:
    try:
        path = tuple(ast.literal_eval(path_text))
    except (ValueError, SyntaxError):
        path = ()
    header = next((h for h in index.headers if h.line == line), None)
    col = header.col if header else 1
    first = index.exact(path) if path else None
    where = f"; it is already declared at line {first[0]}" if first else ""
    name = format_path(path) if path else "table"
    reporter.at(line, col, f"duplicate table [{name}]{where}: a table may be declared only "
                           "once (merge the two)", path=name)
    following = [h.line for h in index.headers if h.line > line]
    end = following[0] - 1 if following else len(lines)
    for k in range(line - 1, end):
        _blank(lines, k, blanked)
    return True


def _blank(lines: list[str], k: int, blanked: set[int]) -> bool:
    """Empty line ``k`` (0-based); True when it had content."""
    if 0 <= k < len(lines) and lines[k].strip():
        lines[k] = ""
        blanked.add(k + 1)
        return True
    return False


def _last_content_line(lines: list[str]) -> int:
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].strip():
            return k + 1
    return 1


def _byte_position(raw: bytes, offset: int) -> tuple[int, int]:
    line = raw.count(b"\n", 0, offset) + 1
    start = raw.rfind(b"\n", 0, offset) + 1
    return line, len(raw[start:offset].decode("utf-8", errors="replace")) + 1


def _failed(name: str, message: str, problem: Problem | None = None) -> ParsedFile:
    reporter = Reporter(name)
    reporter.add(problem or Problem(name, 1, 1, message))
    return ParsedFile(name, "", None, PositionIndex(""), reporter)
