"""E-mail addresses in cadenza.toml and jobs.toml: a malformed one (no domain, a header in
it, a list, a display name) is a located problem of the file, never a message sent."""

from __future__ import annotations

import pytest
from config_helpers import MINIMAL_SETTINGS, MakeHome, line_of

from cadenza.config import validate_home

BAD = ['\\"@x.y', "a@b", "ops@example.org, boss@example.org", "a@example.org\\r\\nBcc: x@y.org",
       "Ops <ops@example.org>", "ops..desk@example.org", "ops@example.org."]


@pytest.mark.parametrize("address", BAD)
def test_a_channel_sender_a_rule_and_an_alert_refuse_it(make_home: MakeHome,
                                                        address: str) -> None:
    settings = MINIMAL_SETTINGS.replace('sender = "cadenza@example.org"',
                                        f'sender = "{address}"  # the sender') + f"""
[[rules]]
name = "r"
on = ["failed"]
jobs = ["*"]
notify = ["role:ops", "{address}"]  # the rule
"""
    jobs = f"""
[jobs.j]
[jobs.j.alerts]
recipients = ["{address}"]  # the alert
[[jobs.j.steps]]
name = "tell"
type = "notify"
to = ["user:ana", "{address}"]  # the step
subject = "s"
body = "b"
"""
    home = make_home(settings=settings, jobs=jobs)
    problems = [p for p in validate_home(home) if p.is_error]
    found = {(p.file, p.line) for p in problems}
    for file, text, needle in (("cadenza.toml", settings, "# the sender"),
                               ("cadenza.toml", settings, "# the rule"),
                               ("jobs.toml", jobs, "# the alert"),
                               ("jobs.toml", jobs, "# the step")):
        assert (file, line_of(text, needle)) in found, (needle, problems)
    assert all("e-mail address" in p.message for p in problems), problems


def test_plain_addresses_and_references_pass(make_home: MakeHome) -> None:
    settings = MINIMAL_SETTINGS + """
[[rules]]
name = "r"
on = ["failed"]
jobs = ["*"]
notify = ["first.last+cz@mail.example.org", "role:ops", "user:ana", "${env.CZ_TO}"]
"""
    home = make_home(settings=settings)
    assert [p for p in validate_home(home, environ={"CZ_TO": "ops@example.org"})
            if p.is_error] == []
    # the value a reference gives is checked too (and not shown)
    wrong = [p for p in validate_home(home, environ={"CZ_TO": "ops@example.org\nBcc: x@y.z"})
             if p.is_error]
    assert [p.path for p in wrong] == ["rules[0].notify[3]"]
