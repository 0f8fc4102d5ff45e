"""The database refuses illegal resource state changes itself (SQLite and PostgreSQL): raw
UPDATEs, every (from, to) pair, the leaser's shortcuts with and without their proof, and
the installed trigger being the one built from the state table now."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import pytest
import sqlalchemy as sa

from cadenza.domain.states import (
    RESOURCE_SHORTCUTS,
    RESOURCE_TRANSITIONS,
    Lease,
    ResourceState,
    is_allowed,
)
from cadenza.store import Store
from cadenza.store.state_guard import PG_FUNCTION, allowed_from, sqlite_trigger
from cadenza.store.tables import resources

Force = Callable[[sa.Table, object, StrEnum], None]
X = ResourceState


def _row(store: Store, rid: str) -> tuple[str, int, str | None]:
    with store.read() as c:
        row = c.execute(sa.select(resources.c.state, resources.c.lease_epoch,
                                  resources.c.lease_owner)
                        .where(resources.c.resource_id == rid)).one()
    return row[0], int(row[1]), row[2]


def _raw(store: Store, sql: str, **params: object) -> bool:
    """Run ``sql`` in its own transaction: True when it committed, False when the database
    refused it (IntegrityError; nothing of the transaction stays)."""
    try:
        with store.write() as conn:
            conn.execute(sa.text(sql), params)
    except sa.exc.IntegrityError as exc:
        assert "resource state transition refused" in str(exc)
        return False
    return True


def test_a_raw_update_from_cooldown_to_running_is_refused(store: Store, force: Force) -> None:
    store.upsert_resource("u-1", "desk", "unit")
    force(resources, "u-1", X.COOLDOWN)
    before = _row(store, "u-1")
    assert not _raw(store, "UPDATE resources SET state = 'RUNNING' WHERE state = 'COOLDOWN'")
    assert not _raw(store, "UPDATE resources SET state = 'LEASED' WHERE state = 'COOLDOWN'")
    assert _row(store, "u-1") == before == ("COOLDOWN", 0, None)
    # The legal way out still works, raw too.
    assert _raw(store, "UPDATE resources SET state = 'AVAILABLE' WHERE state = 'COOLDOWN'")
    assert _row(store, "u-1")[0] == "AVAILABLE"


def test_every_state_pair_against_the_trigger(store: Store, force: Force) -> None:
    """Each (from, to), by a raw UPDATE of ``state`` alone: committed exactly when the
    table allows it; refused otherwise, the row as it was."""
    problems: list[str] = []
    for frm in ResourceState:
        for to in ResourceState:
            rid = f"g-{frm}-{to}".lower()
            store.upsert_resource(rid, "pairs", "unit")
            force(resources, rid, frm)
            before = _row(store, rid)
            done = _raw(store, "UPDATE resources SET state = :to WHERE resource_id = :rid",
                        to=to.value, rid=rid)
            after = _row(store, rid)
            expected = frm is to or is_allowed(RESOURCE_TRANSITIONS, frm, to)
            if done != expected:
                problems.append(f"{frm}->{to}: {'accepted' if done else 'refused'}")
            elif done and after[0] != to.value:
                problems.append(f"{frm}->{to}: committed as {after[0]}")
            elif not done and after != before:
                problems.append(f"{frm}->{to}: refused but the row changed to {after}")
    assert problems == []


@pytest.mark.parametrize(("pair", "lease"), sorted(RESOURCE_SHORTCUTS.items()))
def test_a_leaser_shortcut_needs_its_lease_change(store: Store, force: Force,
                                                 pair: tuple[ResourceState, ResourceState],
                                                 lease: Lease) -> None:
    frm, to = pair
    store.upsert_resource("s-1", "pairs", "unit")
    force(resources, "s-1", frm)
    set_owner = "'run-1'" if lease is Lease.TAKEN else "NULL"
    if lease is Lease.GIVEN_BACK:  # a held member has a holder and an epoch to go back on
        _raw(store, "UPDATE resources SET lease_owner = 'run-1', lease_epoch = 5"
                    " WHERE resource_id = 's-1'")
    sign = "+" if lease is Lease.TAKEN else "-"
    wrong = "-" if lease is Lease.TAKEN else "+"
    bare = f"UPDATE resources SET state = '{to.value}' WHERE resource_id = 's-1'"
    assert not _raw(store, bare)
    assert not _raw(store, f"UPDATE resources SET state = '{to.value}', lease_owner ="
                           f" {set_owner}, lease_epoch = lease_epoch {wrong} 1"
                           f" WHERE resource_id = 's-1'")
    assert _row(store, "s-1")[0] == frm.value
    assert _raw(store, f"UPDATE resources SET state = '{to.value}', lease_owner ="
                       f" {set_owner}, lease_epoch = lease_epoch {sign} 1"
                       f" WHERE resource_id = 's-1'")
    assert _row(store, "s-1")[0] == to.value


def test_an_unknown_state_is_refused(store: Store) -> None:
    store.upsert_resource("u-9", "desk", "unit")
    assert not _raw(store, "UPDATE resources SET state = 'BROKEN' WHERE resource_id = 'u-9'")


def test_the_database_holds_the_guard_built_from_the_table_now(store: Store) -> None:
    """A change of the state table without a migration that installs the guard again
    fails here."""
    with store.read() as c:
        if store.dialect == "sqlite":
            found = c.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'trigger'"
                                      " AND tbl_name = 'resources'")).scalars().all()
            assert found == [sqlite_trigger()]
        else:
            body = c.execute(sa.text("SELECT prosrc FROM pg_proc WHERE proname = :name"),
                             {"name": PG_FUNCTION}).scalar_one()
            for frm in ResourceState:
                assert f"ok := {allowed_from(frm)};" in body
