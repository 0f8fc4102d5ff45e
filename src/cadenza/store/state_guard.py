"""The resource state machine enforced by the database itself: triggers generated from
:data:`~cadenza.domain.states.RESOURCE_TRANSITIONS` (and the leaser's
:data:`~cadenza.domain.states.RESOURCE_SHORTCUTS`), on SQLite and PostgreSQL alike.

The store already moves resources only by compare-and-swap (``UPDATE ... WHERE state IN
(sources)``); the triggers refuse what any other statement would do wrong — a hand-written
``UPDATE resources SET state = 'RUNNING' WHERE state = 'COOLDOWN'``, a bug in a fast path —
by failing the statement (SQLite: ``RAISE(ABORT)``; PostgreSQL: SQLSTATE 23514,
``check_violation``; both reach SQLAlchemy as :class:`sqlalchemy.exc.IntegrityError`).

A change of ``state`` is accepted when (old, new) is in the table, or is one of the
leaser's shortcuts with the lease change that proves it (a lease taken: ``lease_epoch`` one
more and a holder; given back: one less and no holder). An UPDATE that leaves ``state``
unchanged is not looked at; rows are checked, not INSERTs (a restore copies rows as they
were).

The SQL is built here from the tables; a migration creates it (``0017``). Changing either
table needs a new migration that calls :func:`drop_guard` and :func:`create_guard` again:
``tests/contract/test_store_state_guard.py`` compares what the database holds with what
this module builds now.
"""

from __future__ import annotations

from collections.abc import Iterable

from cadenza.domain.states import (
    RESOURCE_SHORTCUTS,
    RESOURCE_TRANSITIONS,
    Lease,
    ResourceState,
)

PG_FUNCTION = "cadenza_resource_state_guard"
PG_TRIGGER = "resources_state_guard"


def _quoted(states: Iterable[ResourceState]) -> str:
    return ", ".join(f"'{s.value}'" for s in sorted(states))


_PROOF = {
    Lease.TAKEN: "NEW.lease_epoch = OLD.lease_epoch + 1 AND NEW.lease_owner IS NOT NULL",
    Lease.GIVEN_BACK: "NEW.lease_epoch = OLD.lease_epoch - 1 AND NEW.lease_owner IS NULL",
}


def allowed_from(frm: ResourceState) -> str:
    """The SQL condition (over ``OLD`` and ``NEW``) under which a resource in ``frm`` may
    take ``NEW.state``."""
    parts: list[str] = []
    targets = RESOURCE_TRANSITIONS.get(frm, frozenset())
    if targets:
        parts.append(f"NEW.state IN ({_quoted(targets)})")
    for lease in Lease:
        shortcut = [to for (f, to), how in RESOURCE_SHORTCUTS.items()
                    if f is frm and how is lease]
        if shortcut:
            parts.append(f"(NEW.state IN ({_quoted(shortcut)}) AND {_PROOF[lease]})")
    return " OR ".join(parts) if parts else "0 = 1"


def allowed() -> str:
    """The whole table as one SQL condition: ``CASE OLD.state WHEN ... END``."""
    whens = " ".join(f"WHEN '{frm.value}' THEN {allowed_from(frm)}" for frm in ResourceState)
    return f"CASE OLD.state {whens} ELSE 0 = 1 END"


def table_text() -> str:
    """The allowed changes, as the refusal on SQLite quotes them (a literal: SQLite's
    RAISE takes no expression, so it cannot name the row's states)."""
    parts = []
    for frm in ResourceState:
        targets = sorted(RESOURCE_TRANSITIONS.get(frm, frozenset()))
        parts.append(f"{frm.value} -> {', '.join(t.value for t in targets) or 'none'}")
    return "; ".join(parts)


SQLITE_TRIGGER = "resources_state_guard"


def sqlite_trigger() -> str:
    """The ``CREATE TRIGGER`` on SQLite: one trigger, run only when ``state`` changes."""
    return (f"CREATE TRIGGER {SQLITE_TRIGGER} BEFORE UPDATE OF state ON resources"
            f" FOR EACH ROW WHEN NEW.state IS NOT OLD.state AND NOT ({allowed()})"
            f" BEGIN SELECT RAISE(ABORT, 'resource state transition refused; allowed: "
            f"{table_text()}'); END")


def pg_function() -> str:
    """The PostgreSQL trigger function (``CREATE OR REPLACE FUNCTION``)."""
    branches = "\n".join(
        f"  {'IF' if i == 0 else 'ELSIF'} OLD.state = '{frm.value}' THEN\n"
        f"    ok := {allowed_from(frm)};"
        for i, frm in enumerate(ResourceState))
    return (
        f"CREATE OR REPLACE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        "DECLARE\n  ok boolean := false;\nBEGIN\n"
        f"{branches}\n  END IF;\n"
        "  IF NOT coalesce(ok, false) THEN\n"
        "    RAISE EXCEPTION 'resource state transition refused: % % -> %',"
        " OLD.resource_id, OLD.state, NEW.state\n"
        "      USING ERRCODE = 'check_violation',\n"
        "            HINT = 'allowed changes follow the resource state table';\n"
        "  END IF;\n  RETURN NEW;\nEND\n$$")


def pg_trigger() -> str:
    """The PostgreSQL ``CREATE TRIGGER`` (the function runs only when ``state`` changes)."""
    return (f"CREATE TRIGGER {PG_TRIGGER} BEFORE UPDATE OF state ON resources FOR EACH ROW"
            f" WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION {PG_FUNCTION}()")


def create_guard(dialect: str) -> list[str]:
    """The statements that install the guard on ``dialect`` (``sqlite`` or
    ``postgresql``)."""
    if dialect == "postgresql":
        return [pg_function(), pg_trigger()]
    if dialect == "sqlite":
        return [sqlite_trigger()]
    raise ValueError(f"no resource state guard for {dialect!r}")


def drop_guard(dialect: str) -> list[str]:
    """The statements that remove the guard from ``dialect``."""
    if dialect == "postgresql":
        return [f"DROP TRIGGER IF EXISTS {PG_TRIGGER} ON resources",
                f"DROP FUNCTION IF EXISTS {PG_FUNCTION}()"]
    if dialect == "sqlite":
        return [f"DROP TRIGGER IF EXISTS {SQLITE_TRIGGER}"]
    raise ValueError(f"no resource state guard for {dialect!r}")
