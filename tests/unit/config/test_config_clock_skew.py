"""``[workers].max_clock_skew``: how far a node's clock may differ from the store's time
before its reaper stops (docs/configuration.md "Run leases", docs/leases.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from config_helpers import MakeHome

from cadenza.config import load_home, validate_home
from cadenza.config.schema_settings import Settings


def test_the_default_is_thirty_seconds() -> None:
    assert Settings().workers.max_clock_skew == timedelta(seconds=30)


def test_a_duration_sets_it(make_home: MakeHome) -> None:
    home = make_home(settings='[workers]\nmax_clock_skew = "2m"\n')
    assert load_home(home).settings.workers.max_clock_skew == timedelta(minutes=2)


@pytest.mark.parametrize("value", ['"0s"', '"2h"'])
def test_a_skew_out_of_bounds_is_a_located_error(make_home: MakeHome, value: str) -> None:
    home = make_home(settings=f"[workers]\nmax_clock_skew = {value}\n")
    problems = validate_home(home)
    assert [(p.line, p.col) for p in problems] == [(2, 18)], problems
    assert 'between "1s" and "1h"' in problems[0].message
