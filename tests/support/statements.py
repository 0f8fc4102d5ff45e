"""The kinds of the statements a store executes (SELECT, UPDATE, ...), in order: tests count
round trips and writes this way instead of betting on wall time."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from cadenza.store import Store


def statement_kinds(store: Store) -> list[str]:
    """A list that fills with the first word of every statement ``store``'s engine runs
    from now on (the listener stays for the engine's life)."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split()[0].upper())

    sa.event.listen(store.engine, "before_cursor_execute", before)
    return seen
