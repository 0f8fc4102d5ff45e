"""Located problems: what is wrong, in which file, at which line and column.

Every check of the configuration reports through a :class:`Reporter`, which turns a key
path such as ``("jobs", "sales-load", "steps", 1, "name")`` into a line and column with
the file's :class:`~cadenza.config.locate.PositionIndex`. A problem prints as::

    jobs.toml:12:1: error: jobs.sales-load.steps[1]: missing required key 'query'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cadenza.config.locate import PositionIndex

Severity = Literal["error", "warning"]
PathElem = str | int
KeyPath = tuple[PathElem, ...]
Anchor = Literal["key", "value", "parent"]

_BARE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Problem:
    """One problem of one configuration file.

    ``file`` is the file's name relative to the home (``jobs.toml``); ``line`` and ``col``
    count from 1; ``path`` is the dotted key path (``jobs.x.steps[1].name``, empty for
    problems of the whole file or of its syntax).
    """

    file: str
    line: int
    col: int
    message: str
    severity: Severity = "error"
    path: str = ""

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}:{self.col}: {self.severity}: {where}{self.message}"

    @property
    def is_error(self) -> bool:
        """True for errors, False for warnings."""
        return self.severity == "error"


def format_path(path: Sequence[PathElem]) -> str:
    """``("jobs", "a b", "steps", 1, "name")`` → ``jobs."a b".steps[1].name``."""
    out = ""
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
            continue
        text = elem if _BARE.fullmatch(elem) else '"' + elem.replace('"', '\\"') + '"'
        out += f".{text}" if out else text
    return out


def has_errors(problems: Iterable[Problem]) -> bool:
    """True when at least one problem is an error."""
    return any(p.is_error for p in problems)


def sort_problems(problems: Iterable[Problem], files: Sequence[str] = ()) -> list[Problem]:
    """Problems in file order (``files`` first, in that order), then line and column."""
    order = {name: i for i, name in enumerate(files)}
    return sorted(
        problems, key=lambda p: (order.get(p.file, len(order)), p.file, p.line, p.col)
    )


@dataclass
class Reporter:
    """Collects the problems of one file, locating each key path through ``index``."""

    file: str
    index: PositionIndex | None = None
    problems: list[Problem] = field(default_factory=list)
    _seen: set[Problem] = field(default_factory=set, repr=False)

    def error(self, path: Sequence[PathElem], message: str, *, at: Anchor = "value") -> None:
        """Report an error about ``path``; ``at`` picks the key, its value or its parent."""
        self._add(path, message, "error", at)

    def warning(self, path: Sequence[PathElem], message: str, *, at: Anchor = "value") -> None:
        """Report a warning about ``path``."""
        self._add(path, message, "warning", at)

    def at(self, line: int, col: int, message: str, severity: Severity = "error",
           path: str = "") -> None:
        """Report a problem at an explicit position (syntax errors, bad bytes)."""
        self._append(Problem(self.file, line, col, message, severity, path))

    def _add(self, path: Sequence[PathElem], message: str, severity: Severity,
             anchor: Anchor) -> None:
        key_path: KeyPath = tuple(path)
        shown = key_path[:-1] if anchor == "parent" else key_path
        line, col = self.position(key_path, anchor)
        self._append(Problem(self.file, line, col, message, severity, format_path(shown)))

    def position(self, path: KeyPath, anchor: Anchor = "value") -> tuple[int, int]:
        """Where ``path`` is written (falling back to its nearest located parent)."""
        if self.index is None:
            return (1, 1)
        if anchor == "parent":
            return self.index.key(path[:-1])
        if anchor == "key":
            return self.index.key(path)
        return self.index.value(path)

    def add(self, problem: Problem) -> None:
        """Report a problem built elsewhere."""
        self._append(problem)

    def _append(self, problem: Problem) -> None:
        if problem not in self._seen:  # one cause can be found by two checks; say it once
            self._seen.add(problem)
            self.problems.append(problem)

    @property
    def failed(self) -> bool:
        """True once an error has been reported."""
        return has_errors(self.problems)
