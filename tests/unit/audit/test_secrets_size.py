"""A secret holds at most 64 KiB: refused when set, and when read if stored before."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza.audit import secrets as secrets_module
from cadenza.audit.secrets import SecretStore
from cadenza.clock import FakeClock
from cadenza.domain.errors import SecretError

MAX_SECRET_BYTES = 64 * 1024


@pytest.fixture
def store(tmp_path: Path) -> SecretStore:
    return SecretStore(tmp_path, clock=FakeClock("2027-03-01T12:00:00+00:00"))


def test_the_limit_is_64_kib() -> None:
    assert secrets_module.MAX_SECRET_BYTES == MAX_SECRET_BYTES


def test_a_value_of_64_kib_is_stored_and_one_byte_more_refused(store: SecretStore) -> None:
    store.set("pem", "k" * MAX_SECRET_BYTES)
    assert store.get("pem") == "k" * MAX_SECRET_BYTES
    with pytest.raises(ValueError, match=r"secret big is 65,537 bytes; a secret holds at "
                                         r"most 65,536 bytes \(64 KiB\)"):
        store.set("big", "k" * (MAX_SECRET_BYTES + 1))
    assert store.names() == ["pem"]


def test_the_limit_counts_utf8_bytes(store: SecretStore) -> None:
    with pytest.raises(ValueError, match="65,538 bytes"):
        store.set("wide", "é" * (MAX_SECRET_BYTES // 2 + 1))  # 2 bytes each


def test_a_larger_secret_stored_before_the_limit_is_refused_when_read(
        store: SecretStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.set("small", "a-small-secret-value")
    with monkeypatch.context() as m:  # as an older Cadenza, without the limit, wrote it
        m.setattr(secrets_module, "MAX_SECRET_BYTES", 10 << 20, raising=False)
        store.set("huge", "z" * (5 << 20))
    with pytest.raises(SecretError, match=r"secret huge is 5,242,880 bytes; .*"
                                          r"`cadenza secrets set huge`"):
        store.get("huge")
    # Nothing can use it, so the redactor is not made to search for it.
    assert store.values() == {"a-small-secret-value"}
    assert store.get("small") == "a-small-secret-value"
