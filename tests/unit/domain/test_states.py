from __future__ import annotations

import itertools

import pytest

from cadenza.domain.errors import InvalidTransition
from cadenza.domain.states import (
    RESOURCE_TRANSITIONS,
    RUN_TRANSITIONS,
    ResourceState,
    RunState,
    check,
    is_allowed,
    sources_of,
)


def test_run_table_matches_spec() -> None:
    allowed = {(f, t) for f, ts in RUN_TRANSITIONS.items() if f for t in ts}
    R = RunState
    assert allowed == {
        (R.QUEUED, R.RUNNING),
        (R.QUEUED, R.CANCELED),
        (R.RUNNING, R.SUCCEEDED),
        (R.RUNNING, R.FAILED),
        (R.RUNNING, R.CANCELED),
        (R.RUNNING, R.QUEUED),
        (R.RUNNING, R.NEEDS_REVIEW),
        (R.NEEDS_REVIEW, R.QUEUED),
        (R.NEEDS_REVIEW, R.FAILED),
    }
    assert RUN_TRANSITIONS[None] == {R.QUEUED, R.MISSED}


def test_every_pair_is_checked() -> None:
    for frm, to in itertools.product(list(RunState), list(RunState)):
        if is_allowed(RUN_TRANSITIONS, frm, to):
            check("run", RUN_TRANSITIONS, frm, to)
        else:
            with pytest.raises(InvalidTransition):
                check("run", RUN_TRANSITIONS, frm, to)


def test_resource_any_to_disabled_and_back() -> None:
    X = ResourceState
    assert sources_of(RESOURCE_TRANSITIONS, X.DISABLED) == set(X) - {X.DISABLED}
    assert sources_of(RESOURCE_TRANSITIONS, X.AVAILABLE) == {
        X.LEASED,
        X.COOLDOWN,
        X.FAULT,
        X.DISABLED,
    }
    assert not is_allowed(RESOURCE_TRANSITIONS, X.AVAILABLE, X.RUNNING)


def test_each_leaser_shortcut_is_a_path_of_the_table_or_its_undoing() -> None:
    """A shortcut the database accepts skips only steps the table has: a lease taken
    passes through LEASED along allowed moves; one given back undoes such a path."""
    from cadenza.domain.states import RESOURCE_SHORTCUTS, Lease

    def reachable(frm: ResourceState, to: ResourceState, via: ResourceState) -> bool:
        def walk(a: ResourceState, b: ResourceState) -> bool:
            seen, todo = {a}, [a]
            while todo:
                here = todo.pop()
                for nxt in RESOURCE_TRANSITIONS[here]:
                    if nxt is b:
                        return True
                    # only the automatic steps a claim makes: no operator, no fault
                    if nxt not in seen and nxt not in (ResourceState.DISABLED,
                                                       ResourceState.FAULT):
                        seen.add(nxt)
                        todo.append(nxt)
            return a is b
        return walk(frm, via) and walk(via, to)

    for (frm, to), lease in RESOURCE_SHORTCUTS.items():
        assert not is_allowed(RESOURCE_TRANSITIONS, frm, to), (frm, to)
        if lease is Lease.TAKEN:
            assert reachable(frm, to, ResourceState.LEASED), (frm, to)
        else:
            assert reachable(to, frm, ResourceState.LEASED), (frm, to)
