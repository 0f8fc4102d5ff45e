"""The notifications' outbox on every store (SQLite and PostgreSQL): intents commit or roll
back with the change that causes them, one intent per key, claims that two senders never
share, and the claims of a dead sender taken back."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.fires import NewFire
from cadenza.store.hooks import StoreHooks
from cadenza.store.outbox import Intent, Outbox, Target
from cadenza.store.tables import notification_outbox, runs


def intent(key: str) -> Intent:
    return Intent(key, "failed", None, "nightly", (Target("alerts", None, ("a@example.org",)),),
                  {})


def outbox_keys(store: Store) -> list[str]:
    with store.read() as c:
        return sorted(c.execute(sa.select(notification_outbox.c.event_key)).scalars())


def test_the_missed_hook_runs_once_per_inserted_missed_fire(store: Store,
                                                           clock: FakeClock) -> None:
    seen: list[list[tuple[str, str]]] = []

    def hook(conn: sa.Connection, missed: list[tuple[str, str]], now: object) -> None:
        seen.append(missed)
        Outbox(store).add(conn, [intent(f"missed:{r}") for r, _ in missed], clock.now())

    store.use_hooks(StoreHooks(missed=(hook,)))
    t = clock.now()
    fires = [NewFire("nightly", "job", t, state=RunState.MISSED, reason="missed"),
             NewFire("nightly", "job", t + timedelta(days=1))]
    first = store.create_fires(fires)
    assert seen == [[(first[0], "nightly")]]  # the QUEUED fire is no MISSED row
    assert store.create_fires(fires) == [None, None]  # recorded already: no hook call
    assert len(seen) == 1 and outbox_keys(store) == [f"missed:{first[0]}"]


def test_an_intent_rolls_back_with_its_cause(store: Store, clock: FakeClock) -> None:
    store.use_hooks(StoreHooks(missed=(lambda conn, missed, now: Outbox(store).add(
        conn, [intent(f"missed:{r}") for r, _ in missed], clock.now()),)))
    with pytest.raises(RuntimeError), store.write() as conn:
        store.create_fires([NewFire("nightly", "job", clock.now(), state=RunState.MISSED)],
                           conn=conn)
        raise RuntimeError("the scheduler's transaction fails after the insert")
    with store.read() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one() == 0
    assert outbox_keys(store) == []


@pytest.mark.reliability_case(52)
def test_one_intent_per_key(store: Store, clock: FakeClock) -> None:
    outbox = Outbox(store)
    with store.write() as c:
        assert outbox.add(c, [intent("failed:R1"), intent("failed:R2")], clock.now()) == 2
    with store.write() as c:
        assert outbox.add(c, [intent("failed:R1"), intent("failed:R3")], clock.now()) == 1
    assert outbox_keys(store) == ["failed:R1", "failed:R2", "failed:R3"]


def test_two_senders_never_claim_one_intent(store_url: str, store: Store,
                                            clock: FakeClock) -> None:
    outbox = Outbox(store)
    with store.write() as c:
        outbox.add(c, [intent(f"failed:R{k}") for k in range(40)], clock.now())
    other = Store.open(store_url, clock=clock, migrate=False)
    try:
        got: dict[str, list[int]] = {}
        barrier = threading.Barrier(2)

        def take(name: str, where: Store) -> None:
            barrier.wait()
            ids: list[int] = []
            while claimed := Outbox(where).claim(name, 3, timedelta(minutes=5)):
                ids += [c.id for c in claimed]
            got[name] = ids

        threads = [threading.Thread(target=take, args=(n, s))
                   for n, s in (("a:1:1", store), ("b:2:1", other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        other.close()
    taken = got["a:1:1"] + got["b:2:1"]
    assert sorted(taken) == sorted(set(taken)) and len(taken) == 40
    # Held: nothing is due again until the claims end.
    assert outbox.claim("c:3:1", 10, timedelta(minutes=5)) == []
    clock.advance(timedelta(minutes=5, seconds=1))
    assert len(outbox.claim("c:3:1", 100, timedelta(minutes=5))) == 40


def test_the_claims_of_a_dead_sender_of_this_host_are_taken_back(store: Store,
                                                                  clock: FakeClock) -> None:
    outbox = Outbox(store)
    with store.write() as c:
        outbox.add(c, [intent("failed:R1"), intent("failed:R2")], clock.now())
    (first,) = outbox.claim("here:111:1", 1, timedelta(minutes=5))
    (second,) = outbox.claim("here:222:1", 1, timedelta(minutes=5))
    freed = outbox.release_dead_claims("here", lambda pid: pid == 222)
    assert freed == 1
    (again,) = outbox.claim("here:333:1", 10, timedelta(minutes=5))
    assert again.id == first.id  # the dead one's; the live sender keeps its own
    assert outbox.release_dead_claims("elsewhere", lambda pid: False) == 0
    assert second.id != first.id


def test_a_configuration_that_cannot_load_never_fails_the_change(
        store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    from cadenza.assembly import assemble
    from cadenza.domain.errors import ConfigError

    def broken() -> object:
        raise ConfigError([])

    assemble(store, broken)  # type: ignore[arg-type]
    (run_id,) = store.create_fires([NewFire("nightly", "job", clock.now(),
                                            state=RunState.MISSED)])
    assert run_id is not None and store.get_run(run_id) is not None
    assert outbox_keys(store) == []
    assert f"no notification queued for the MISSED fire of run(s) {run_id}" in caplog.text
