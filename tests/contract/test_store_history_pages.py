"""The history's keyset pages in the store (the runs page, GET /api/runs): ``before`` and
``after`` walk the same order both ways, several states merge in order, ties on the
creation time break on the id."""

from __future__ import annotations

import pytest

from cadenza.clock import FakeClock
from cadenza.domain.states import RunState
from cadenza.store import Store


def _made(store: Store, clock: FakeClock, n: int) -> list[str]:
    made = []
    for i in range(n):
        run_id = store.create_run("pages", "manual")
        assert run_id is not None
        made.append(run_id)
        if i % 3 != 2:  # some runs share a creation time: the id breaks the tie
            clock.advance(1)
    return made


def test_before_and_after_walk_the_same_order(store: Store, clock: FakeClock) -> None:
    made = _made(store, clock, 11)
    newest_first = [r.id for r in store.list_runs(job="pages", limit=100)]
    assert sorted(newest_first) == sorted(made) and len(newest_first) == 11
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = [r.id for r in store.list_runs(job="pages", limit=4, before=cursor)]
        if not page:
            break
        pages.append(page)
        cursor = page[-1]
    assert [i for p in pages for i in p] == newest_first
    # and back up with after: the same pages, newest first within each
    up = [r.id for r in store.list_runs(job="pages", limit=4, after=pages[-1][0])]
    assert up == pages[-2]
    assert [r.id for r in store.list_runs(job="pages", limit=100, after=newest_first[-1])] \
        == newest_first[:-1]
    assert store.list_runs(job="pages", after=newest_first[0]) == []


@pytest.mark.parametrize("states", [[RunState.CANCELED, RunState.QUEUED], [RunState.QUEUED]])
def test_several_states_merge_newest_first(store: Store, clock: FakeClock,
                                           states: list[RunState]) -> None:
    made = _made(store, clock, 9)
    for run_id in made[::2]:
        assert store.transition_run(run_id, RunState.CANCELED)
    everything = [r.id for r in store.list_runs(job="pages", limit=100)]
    wanted = {r.id for r in store.list_runs(job="pages", limit=100)
              if r.state in states}
    expected = [i for i in everything if i in wanted]
    got = [r.id for r in store.list_runs(job="pages", state=states, limit=3)]
    assert got == expected[:3]
    older = [r.id for r in store.list_runs(job="pages", state=states, limit=100,
                                           before=got[-1])]
    assert older == expected[3:]
    newer = [r.id for r in store.list_runs(job="pages", state=states, limit=2,
                                           after=expected[-1])]
    assert newer == expected[-3:-1]
    assert store.list_runs(job="pages", state=[], limit=5) == []

