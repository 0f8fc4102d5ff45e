"""Only the zone database's IANA names are time zones: never a system file's alias."""

from __future__ import annotations

import pytest
from config_helpers import MakeHome, line_of

from cadenza.config import Problem, load_home
from cadenza.domain.errors import ConfigError

JOB = """\
[jobs.nightly]
schedule = "0 2 * * *"
timezone = "{zone}"

[[jobs.nightly.steps]]
name = "a"
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""


@pytest.mark.parametrize("zone", [
    "localtime", "posixrules", "right/UTC", "posix/Europe/Paris", "Factory",
    "/usr/share/zoneinfo/UTC", "../../etc/passwd", "Europe/../Europe/Paris",
])
@pytest.mark.reliability_case(14)
def test_a_non_iana_zone_is_refused_at_its_line(make_home: MakeHome, zone: str) -> None:
    text = JOB.format(zone=zone)
    home = make_home(jobs=text)
    with pytest.raises(ConfigError) as caught:
        load_home(home)
    problems = [p for p in caught.value.problems if isinstance(p, Problem)]
    hits = [p for p in problems if "unknown time zone" in p.message]
    assert hits, problems
    assert hits[0].line == line_of(text, "timezone =")
    assert repr(zone) in hits[0].message


@pytest.mark.reliability_case(14)
def test_a_near_miss_suggests_the_closest_name(make_home: MakeHome) -> None:
    home = make_home(jobs=JOB.format(zone="posix/Europe/Paris"))
    with pytest.raises(ConfigError) as caught:
        load_home(home)
    messages = [p.message for p in caught.value.problems if isinstance(p, Problem)]
    assert any("did you mean 'Europe/Paris'" in m for m in messages), messages


def test_an_iana_name_is_accepted(make_home: MakeHome) -> None:
    load_home(make_home(jobs=JOB.format(zone="Europe/Paris")))
