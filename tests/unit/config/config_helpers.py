"""Shared texts and helpers of the config tests (imported by conftest and the tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).parent / "data"

#: SPEC §4's job calls [connections.downstream], which SPEC §3's example does not define;
#: the test home adds it, as `cadenza init --example` does.
DOWNSTREAM = """
[connections.downstream]
type = "http"
base_url = "http://127.0.0.1:8999"
allow_private = true
"""

SECRETS = {
    "billing_token": "tok-billing-0001",
    "ldap_reader": "ldap-pass-0002",
    "proxy_fr_1": "proxy-pass-0003",
    "smtp": "smtp-pass-0004",
}

MINIMAL_SETTINGS = """\
[connections.warehouse]
type = "sql"
url = "sqlite:///data/warehouse.db"

[connections.api]
type = "http"
base_url = "https://api.example.org"

[pools.egress]
kind = "route"
[[pools.egress.members]]
id = "fr-1"
proxy = "http://10.1.2.3:3128"
region = "FR"

[channels.mail]
type = "email"
host = "smtp.example.org"
sender = "cadenza@example.org"
"""

MakeHome = Callable[..., Path]


def line_of(text: str, needle: str) -> int:
    """The 1-based line of ``text`` holding ``needle`` (which must occur exactly once)."""
    lines = [k + 1 for k, line in enumerate(text.splitlines()) if needle in line]
    assert len(lines) == 1, f"{needle!r} found on lines {lines}"
    return lines[0]


def resolve_secret(name: str) -> str | None:
    """The secrets of the SPEC examples."""
    return SECRETS.get(name)
