"""The watch that lets admission see pool members freed by other processes
(:mod:`cadenza.resources.watch`): what counts as "came back", how often it reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cadenza.resources.watch import WATCH, FreeWatch

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@dataclass
class M:
    resource_id: str
    state: str
    updated_at: Any


def seen(*members: M) -> dict[str, M]:
    return {m.resource_id: m for m in members}


def test_a_member_that_becomes_free_is_news_one_that_is_leased_is_not() -> None:
    watch = FreeWatch()
    watch.note(["units"], seen(M("u-1", "RUNNING", 1), M("u-2", "DISABLED", 1),
                               M("u-3", "AVAILABLE", 1)))
    # u-3 leased elsewhere: it only left the free set
    assert watch.moved(seen(M("u-1", "RUNNING", 1), M("u-2", "DISABLED", 1),
                            M("u-3", "LEASED", 2))) is False
    # u-2 enabled from a terminal: free, and not seen free before
    assert watch.moved(seen(M("u-1", "RUNNING", 1), M("u-2", "AVAILABLE", 3),
                            M("u-3", "LEASED", 2))) is True
    # the same again is no news
    assert watch.moved(seen(M("u-1", "RUNNING", 1), M("u-2", "AVAILABLE", 3),
                            M("u-3", "LEASED", 2))) is False
    # u-1's run ended on another node: RUNNING -> COOLDOWN
    assert watch.moved(seen(M("u-1", "COOLDOWN", 4), M("u-2", "AVAILABLE", 3),
                            M("u-3", "LEASED", 2))) is True


def test_a_member_leased_and_freed_again_between_two_looks_is_news() -> None:
    watch = FreeWatch()
    watch.note(["units"], seen(M("u-1", "COOLDOWN", 1)))
    assert watch.moved(seen(M("u-1", "COOLDOWN", 5))) is True  # a new updated_at


def test_it_reads_at_most_every_watch_and_never_while_nothing_is_refused() -> None:
    watch = FreeWatch()
    assert watch.due(T0, refused=True) == []  # no refusal noted: no pool to read
    watch.note(["units"], seen(M("u-1", "RUNNING", 1)))
    watch.note(["egress"], seen(M("r-1", "FAULT", 1)))
    assert watch.due(T0, refused=True) == ["egress", "units"]
    assert watch.due(T0 + WATCH - timedelta(milliseconds=1), refused=True) == []
    assert watch.due(T0 + WATCH, refused=True) == ["egress", "units"]
    # once no run is refused, it forgets the pools (and reads nothing)
    assert watch.due(T0 + 3 * WATCH, refused=False) == []
    assert watch.due(T0 + 4 * WATCH, refused=True) == []
