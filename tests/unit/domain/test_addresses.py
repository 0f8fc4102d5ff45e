"""check_email: one plain address, strictly (the standard library's parser and more)."""

from __future__ import annotations

import pytest

from cadenza.domain.addresses import InvalidAddress, check_email, is_email


@pytest.mark.parametrize("address", [
    "ops@example.org", "first.last+cz@mail.example.co.uk", "o'brien@example.ie",
    "A_B-c@EXAMPLE.ORG", "a@münchen.de", "x@a-b.example"])
def test_plain_addresses_pass(address: str) -> None:
    assert check_email(address) == address and is_email(address)


@pytest.mark.parametrize(("address", "why"), [
    ("", "empty"),
    ('"@x.y', "'\"'"),
    ("a@b", "has no dot"),
    ("@example.org", "does not parse"),
    ("ops@", "does not parse"),
    ("a@b@example.org", "exactly one '@'"),
    ("ops@example.org\r\nBcc: all@example.org", "control character '\\r'"),
    ("ops@example.org\nBcc: all@example.org", "control character '\\n'"),
    ("ops@example.org\x00", "control character"),
    ("ops@example.org, boss@example.org", "','"),
    ("ops@example.org;boss@example.org", "';'"),
    ("Ops <ops@example.org>", "' '"),
    ('"Ops"<ops@example.org>', "'\"'"),
    ("ops@example.org<boss@example.org>", "'<'"),
    ("ops(boss@example.org)@example.org", "'('"),
    ("group:ops@example.org;", "':'"),
    ("a@[10.0.0.1]", "'['"),
    (" ops@example.org", "' '"),
    ("ops..desk@example.org", "does not parse"),
    (".ops@example.org", "does not parse"),
    ("ops@example.org.", "does not parse"),
    ("ops@example..org", "does not parse"),
    ("ops@-example.org", "not a valid host name"),
    ("ops@exa_mple.org", "not a valid host name"),
    ("ops@10.0.0.1", "not a valid host name"),
    ("é@example.org", "does not parse"),
    ("x" * 65 + "@example.org", "longer than 64"),
    ("x@" + "a" * 250 + ".org", "longer than 254"),
])
def test_malformed_addresses_say_why(address: str, why: str) -> None:
    with pytest.raises(InvalidAddress) as caught:
        check_email(address)
    assert why in str(caught.value)
    assert not is_email(address)
