"""The service layer's small values and parsers: actors, states, levels, ages, instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cadenza.domain.states import RunState
from cadenza.services import Actor, InvalidRequest
from cadenza.services.history import check_type, parse_level, parse_since, parse_states
from cadenza.services.timeparse import parse_instant

NOW = datetime(2027, 3, 10, 9, 0, tzinfo=UTC)


def test_an_actor_is_recorded_with_its_kind_and_shown_by_its_name() -> None:
    bob = Actor.user("bob")
    assert (bob.id, str(bob), bob.trigger) == ("user:bob", "user:bob", "manual:bob")
    assert Actor.cli().kind == "cli" and Actor.cli().name


def test_states_and_levels_and_types() -> None:
    assert parse_states(None) is None
    assert parse_states("failed, queued,") == (RunState.FAILED, RunState.QUEUED)
    with pytest.raises(InvalidRequest, match="unknown state DONE; expected one of QUEUED"):
        parse_states("done")
    assert parse_level("debug") == "DEBUG"
    with pytest.raises(InvalidRequest, match="unknown level 'loud'"):
        parse_level("loud")
    assert check_type("run_finished") == "RUN_FINISHED"
    with pytest.raises(InvalidRequest, match="unknown event type 'nope'; known: "):
        check_type("nope")


def test_since_is_an_age_or_an_iso_time() -> None:
    assert parse_since("90m", NOW) == NOW - timedelta(minutes=90)
    assert parse_since("2027-03-01T00:00:00+00:00", NOW) == datetime(2027, 3, 1, tzinfo=UTC)
    with pytest.raises(InvalidRequest, match="--since 'lately': expected an age"):
        parse_since("lately", NOW)


def test_instants_without_an_offset_are_in_the_server_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    assert parse_instant("2027-03-27T12:00", "--from", "x") == datetime(2027, 3, 27, 11,
                                                                        tzinfo=UTC)
    assert parse_instant("2027-03-27T12:00Z", "--from", "x") == datetime(2027, 3, 27, 12,
                                                                         tzinfo=UTC)
    with pytest.raises(InvalidRequest, match="--to: expected an ISO day, got 'soon'"):
        parse_instant("soon", "--to", "an ISO day")
