"""Users, secrets, backup and waiting through the service layer: the actor in the events,
and waits driven by the services' clock (a FakeClock here: nothing sleeps for real)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.services_home import demo_services
from tests.support.store_helpers import start_run

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.services import Actor, InvalidRequest, Refused, Services
from cadenza.services.history import EventQuery
from cadenza.services.users import NewUser


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock("2027-03-10T09:00:00+00:00")


@pytest.fixture
def services(tmp_path: Path, clock: FakeClock) -> Iterator[Services]:
    with demo_services(tmp_path, Actor("cli", "alice"), clock) as services:
        yield services


def test_cancel_wait_gives_up_after_the_timeout_on_the_clock(services: Services,
                                                              clock: FakeClock) -> None:
    run_id = services.runs.enqueue(services.runs.request("hello"))
    store = services.store()
    assert start_run(store, run_id)
    begun = clock.monotonic()
    outcome = services.runs.cancel(run_id, wait=True, timeout=3.0)
    assert outcome.requested and not outcome.ended and outcome.state is RunState.RUNNING
    assert clock.monotonic() - begun == pytest.approx(3.0, abs=0.31)
    assert clock.sleeps and all(s == pytest.approx(0.3) for s in clock.sleeps)


def test_users_record_the_actor_and_never_a_hash(services: Services) -> None:
    added = services.users.add(NewUser("carol", ["operator", " viewer", ""]))
    assert added.roles == ("operator", "viewer") and added.generated_password
    named = services.users.add(NewUser("dave", ["admin"], password="long enough"))
    assert named.generated_password is None
    assert [u.username for u in services.users.list()] == ["admin", "carol", "dave"]
    events = services.history.events(EventQuery(type="USER_CHANGED"))
    assert [e.actor for e in events][-2:] == ["cli:alice", "cli:alice"]
    for bad in (NewUser("x y", ["admin"]), NewUser("eve", []),
                NewUser("eve", ["admin"], email="nope"), NewUser("eve", ["a"], password="short")):
        with pytest.raises(InvalidRequest):
            services.users.add(bad)
    with pytest.raises(Refused):
        services.users.add(NewUser("carol", ["admin"]))


def test_secrets_names_only(services: Services) -> None:
    services.secrets.set("api_pw", "s3cret-value")
    assert services.secrets.names() == ["api_pw"]
    with pytest.raises(InvalidRequest, match="empty value"):
        services.secrets.set("other", "")


def test_backup_then_restore_names_the_actor(services: Services, tmp_path: Path) -> None:
    services.runs.enqueue(services.runs.request("hello"))
    report = services.backup.backup(tmp_path / "copy.db")
    assert report.info.runs == 1
    services.close()
    restored = services.backup.restore(tmp_path / "copy.db")
    assert restored.runs == 1
    events = services.history.events(EventQuery(limit=1000))
    assert "cli:alice" in {e.actor for e in events}


def test_simulate_refuses_an_empty_interval(services: Services) -> None:
    with pytest.raises(InvalidRequest, match="--to must come after --from"):
        services.simulation.simulate("2027-03-02", "2027-03-01")
    fires = services.simulation.simulate("2027-03-01", "2027-03-03")
    assert sorted(f.schedule for f in fires) == ["job", "job", "preset:month-end"]
