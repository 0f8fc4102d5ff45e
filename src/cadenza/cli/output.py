"""How the CLI prints: tables for people, JSON for machines, errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    return str(value)


def print_json(value: Any) -> None:
    """Machine output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(value, default=_default, indent=2, ensure_ascii=False) + "\n")
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
        lines += ["\t".join(_cell(row.get(c)).replace("\t", " ").replace("\n", " ")
                            for c in columns) for row in rows]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        return
    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[_cell(row.get(c)) for c in columns])
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
    """Print ``message`` on stderr and exit with ``code``."""
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)
