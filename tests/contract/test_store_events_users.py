"""The audit log, run logs and users in the store."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.support.store_helpers import append_log

from cadenza.clock import FakeClock
from cadenza.domain.errors import StoreError
from cadenza.domain.events import EventType, Level
from cadenza.store import Store


def test_events_filter_and_page(store: Store, clock: FakeClock) -> None:
    run_id = store.create_run("j", "manual")  # RUN_CREATED
    assert run_id
    store.upsert_resource("fr-1", "egress", "route")  # RESOURCE_STATE_CHANGED
    start = clock.advance(60)
    ids = [
        store.append_event(
            EventType.HTTP_REQUEST,
            f"GET {n}",
            run_id=run_id,
            resource_id="fr-1",
            payload={"status": 200, "n": n},
            level="DEBUG" if n % 2 else Level.INFO,
        )
        for n in range(5)
    ]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert len(store.list_events(run_id=run_id)) == 6
    assert len(store.list_events(resource_id="fr-1")) == 6
    http = store.list_events(event_type=EventType.HTTP_REQUEST)
    assert [e.payload["n"] for e in http] == [0, 1, 2, 3, 4]
    assert [e.level for e in http[:2]] == ["INFO", "DEBUG"]
    assert len(store.list_events(since=start)) == 5
    assert [e.event_id for e in store.list_events(after_id=ids[2])] == ids[3:]
    assert [e.event_id for e in store.list_events(limit=2, newest_first=True)] == ids[:-3:-1]
    assert store.list_events(since=start + timedelta(seconds=1)) == []
    with pytest.raises(ValueError):
        store.append_event("CONFIG_CHANGED", "x", level="LOUD")


def test_a_window_of_events_is_exact_when_ids_and_times_disagree(
        store: Store, clock: FakeClock) -> None:
    """A read with a time starts at the window's smallest event id (migration 0025), not
    at the id of its earliest time: an event written after a clock was set back has a
    larger id and an earlier time, and a window holds exactly the events of its times."""
    start = clock.advance(60)
    store.append_event("CONFIG_CHANGED", "in", actor="user:ana")
    clock.set(start - timedelta(seconds=1))
    store.append_event("CONFIG_CHANGED", "set back", actor="user:ana")
    store.append_event("RESOURCE_LEASED", "u-1 leased", resource_id="u-1")
    clock.set(start + timedelta(seconds=5))
    store.append_event("CONFIG_CHANGED", "after")
    store.append_event("RESOURCE_LEASED", "u-1 leased again", resource_id="u-1")

    def messages(**filters: object) -> list[str]:
        return [e.message for e in store.list_events(**filters)]  # type: ignore[arg-type]

    assert messages(since=start) == ["in", "after", "u-1 leased again"]
    assert messages(since=start, event_type="CONFIG_CHANGED") == ["in", "after"]
    assert messages(since=start, actor="user:ana") == ["in"]
    assert messages(since=start - timedelta(seconds=1), event_type="CONFIG_CHANGED") == [
        "in", "set back", "after"]
    assert messages(since=start, event_type="RESOURCE_LEASED", resources_only=True) == [
        "u-1 leased again"]
    assert messages(since=start - timedelta(seconds=1), event_type="RESOURCE_LEASED",
                    resources_only=True) == ["u-1 leased", "u-1 leased again"]
    assert messages(since=start, event_type="CONFIG_CHANGED", newest_first=True,
                    limit=1) == ["after"]
    assert messages(since=start + timedelta(seconds=6)) == []


def test_an_event_joins_the_callers_transaction(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as conn:
        store.append_event("CONFIG_CHANGED", "never committed", conn=conn)
        raise RuntimeError("rolled back")
    assert store.list_events() == []


def test_run_logs_keep_order_and_follow(store: Store, clock: FakeClock) -> None:
    run_id = store.create_run("j", "manual")
    assert run_id
    first = append_log(store, run_id, "INFO", "starting")
    clock.advance(1)
    append_log(store, run_id, Level.DEBUG, "SELECT 1", step="count")
    append_log(store, run_id, "ERROR", "failed", step="count")
    lines = store.list_logs(run_id)
    assert [(line.level, line.step, line.message) for line in lines] == [
        ("INFO", None, "starting"),
        ("DEBUG", "count", "SELECT 1"),
        ("ERROR", "count", "failed"),
    ]
    assert lines[1].ts == clock.now()
    assert [line.message for line in store.list_logs(run_id, after_id=first)] == [
        "SELECT 1",
        "failed",
    ]
    assert [line.message for line in store.list_logs(run_id, min_level="INFO")] == [
        "starting",
        "failed",
    ]
    assert not store.run_is_finished(run_id)
    with pytest.raises(ValueError):
        append_log(store, run_id, "CHATTY", "x")


def test_users(store: Store) -> None:
    secret_hash = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2g"
    store.add_user(
        "alice",
        secret_hash,
        ["admin", "ops"],
        email="alice@example.org",
        display_name="Alice",
        actor="init",
    )
    store.add_user("bob", "$argon2id$bob", ["viewer"])
    with pytest.raises(StoreError, match="'alice' already exists"):
        store.add_user("alice", "other", ["viewer"])
    alice = store.get_user("alice")
    assert alice is not None
    assert (alice.roles, alice.email, alice.display_name, alice.disabled) == (
        ("admin", "ops"),
        "alice@example.org",
        "Alice",
        False,
    )
    assert alice.password_hash == secret_hash and secret_hash not in repr(alice)
    assert [u.username for u in store.list_users()] == ["alice", "bob"]
    assert store.get_user("carol") is None
    assert store.update_user("bob", disabled=True, password_hash="$argon2id$new", actor="alice")
    assert not store.update_user("carol", disabled=True)
    bob = store.get_user("bob")
    assert bob is not None and bob.disabled and bob.password_hash == "$argon2id$new"
    events = store.list_events(event_type=EventType.USER_CHANGED)
    assert [(e.actor, e.payload["action"]) for e in events] == [
        ("init", "added"),
        ("system", "added"),
        ("alice", "changed"),
    ]
    assert events[2].payload["changed"] == ["disabled", "password_hash"]
    dumped = repr(events)
    assert "argon2id" not in dumped


def test_events_newest_first_pages_and_actor(store: Store) -> None:
    ids = [store.append_event("CONFIG_CHANGED", f"change {i}",
                              actor="user:ana" if i % 2 else "user:bob") for i in range(7)]
    first = store.list_events(newest_first=True, limit=3)
    assert [e.event_id for e in first] == ids[:-4:-1]
    older = store.list_events(newest_first=True, limit=3, before_id=first[-1].event_id)
    assert [e.event_id for e in older] == ids[3:0:-1]
    assert [e.message for e in store.list_events(actor="user:ana")] == [
        "change 1", "change 3", "change 5"]
    assert store.list_events(actor="user:ana", before_id=ids[1]) == []
