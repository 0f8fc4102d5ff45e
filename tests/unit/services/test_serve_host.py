"""Which --host values `cadenza serve` warns about: every one but loopback."""

from __future__ import annotations

import pytest

from cadenza.services.serve import exposed_host


@pytest.mark.parametrize(("host", "exposed"), [
    ("127.0.0.1", False), ("127.0.0.2", False), ("::1", False), ("[::1]", False),
    ("localhost", False), ("0.0.0.0", True), ("::", True), ("192.168.1.20", True),
    ("10.0.0.1", True), ("scheduler.example.org", True),
])
def test_exposed_host(host: str, exposed: bool) -> None:
    assert exposed_host(host) is exposed
