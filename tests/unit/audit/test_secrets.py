"""The encrypted secret store (SPEC §2; RELIABILITY §2 Rundeck CVE-2022-31044, issue #3017)."""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from cadenza.audit import Redactor, SecretStore
from cadenza.audit.secrets import validate_secret_name
from cadenza.clock import FakeClock
from cadenza.domain.errors import SecretError

VALUE = "p@ss: wörd/€ with spaces"
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


@pytest.fixture
def store(tmp_path: Path) -> SecretStore:
    return SecretStore(tmp_path, clock=FakeClock("2027-03-01T12:00:00+00:00"))


def _raw_entries(store: SecretStore) -> dict[str, dict[str, str]]:
    doc = json.loads(store.path.read_text(encoding="utf-8"))
    entries: dict[str, dict[str, str]] = doc["secrets"]
    return entries


def _rewrite(store: SecretStore, entries: dict[str, dict[str, str]]) -> None:
    doc = json.loads(store.path.read_text(encoding="utf-8"))
    doc["secrets"] = entries
    store.path.write_text(json.dumps(doc), encoding="utf-8")


def test_round_trip_and_listing(store: SecretStore) -> None:
    store.set("smtp", VALUE)
    store.set("billing_token", "tok-123")
    assert store.get("smtp") == VALUE
    assert store.get("billing_token") == "tok-123"
    assert store.get("missing") is None
    assert store.names() == ["billing_token", "smtp"]
    assert store.values() == {VALUE, "tok-123"}
    assert store.updated_at("smtp") == "2027-03-01T12:00:00+00:00"
    # A second store on the same home (another process) reads the same values.
    assert SecretStore(store.home).get("smtp") == VALUE


def test_set_replaces_and_delete_removes(store: SecretStore) -> None:
    store.set("a", "first-value")
    store.set("a", "second-value")
    assert store.get("a") == "second-value"
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert store.get("a") is None
    assert store.names() == []


def test_listing_never_exposes_values(store: SecretStore) -> None:
    store.set("ldap_reader", VALUE)
    listed = repr(store.names()) + repr(store) + str(store)
    assert VALUE not in listed
    assert store.names() == ["ldap_reader"]


def test_files_hold_no_plaintext_in_any_encoding(store: SecretStore) -> None:
    store.set("smtp", VALUE)
    raw = store.path.read_bytes()
    for form in (
        VALUE.encode(),
        VALUE.encode("utf-16-le"),
        json.dumps(VALUE).encode(),
        quote(VALUE).encode(),
        base64.b64encode(VALUE.encode()),
        base64.b64encode(VALUE.encode())[:12],
    ):
        assert form not in raw
    assert VALUE.encode() not in store.key_path.read_bytes()


def test_each_write_uses_a_fresh_nonce(store: SecretStore) -> None:
    store.set("a", "same-value")
    first = _raw_entries(store)["a"]["value"]
    store.set("a", "same-value")
    second = _raw_entries(store)["a"]["value"]
    assert first != second
    assert len(base64.b64decode(first)) == 12 + len("same-value") + 16  # nonce + ct + tag


@posix_only
def test_key_and_secrets_files_are_private(store: SecretStore) -> None:
    store.set("a", "value-1")
    assert stat.S_IMODE(store.key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert len(base64.b64decode(store.key_path.read_bytes().strip())) == 32


@posix_only
def test_key_file_readable_by_others_is_refused_with_the_fix(store: SecretStore) -> None:
    store.set("a", "value-1")
    os.chmod(store.key_path, 0o644)
    with pytest.raises(SecretError, match="chmod 600") as caught:
        store.get("a")
    assert "0644" in str(caught.value)
    with pytest.raises(SecretError, match="chmod 600"):
        store.set("b", "value-2")
    os.chmod(store.key_path, 0o600)
    assert store.get("a") == "value-1"


def test_reading_an_empty_store_creates_no_key(store: SecretStore) -> None:
    assert store.names() == []
    assert store.values() == set()
    assert store.get("a") is None
    assert not store.key_path.exists()
    store.set("a", "value-1")
    assert store.key_path.exists()


def test_wrong_key_is_a_clear_error_without_the_value(store: SecretStore) -> None:
    store.set("smtp", VALUE)
    store.key_path.write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    with pytest.raises(SecretError, match="cannot be decrypted") as caught:
        store.get("smtp")
    assert VALUE not in str(caught.value)
    assert "secret.key" in str(caught.value)
    with pytest.raises(SecretError):
        store.values()


def test_tampered_ciphertext_is_refused(store: SecretStore) -> None:
    store.set("smtp", VALUE)
    entries = _raw_entries(store)
    sealed = bytearray(base64.b64decode(entries["smtp"]["value"]))
    sealed[20] ^= 0x01
    entries["smtp"]["value"] = base64.b64encode(bytes(sealed)).decode()
    _rewrite(store, entries)
    with pytest.raises(SecretError, match="was altered") as caught:
        store.get("smtp")
    assert VALUE not in str(caught.value)


def test_ciphertext_moved_to_another_name_is_refused(store: SecretStore) -> None:
    store.set("a", "value-of-a")
    store.set("b", "value-of-b")
    entries = _raw_entries(store)
    entries["b"]["value"] = entries["a"]["value"]  # the name is the associated data
    _rewrite(store, entries)
    assert store.get("a") == "value-of-a"
    with pytest.raises(SecretError, match="'b' cannot be decrypted"):
        store.get("b")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b'{"version": 2, "secrets": {}}', "not a version 1"),
        (b'{"version": 1, "secrets": []}', "not a table"),
        (b'{"version": 1, "secrets": {"a": {"value": 1, "updated_at": "x"}}}', "malformed"),
        (b'{"version": 1, "secrets": {"a/b": {"value": "x", "updated_at": "x"}}}', "malformed"),
        (b'{"version": 1, "secrets": {"a": {"value": "AAAA", "updated_at": "x"}}}', "damaged"),
    ],
)
def test_damaged_files_are_clear_errors(store: SecretStore, content: bytes, message: str) -> None:
    store.set("a", "value-1")
    store.path.write_bytes(content)
    with pytest.raises(SecretError, match=message):
        store.get("a")


def test_damaged_key_file_is_a_clear_error(store: SecretStore) -> None:
    store.set("a", "value-1")
    store.key_path.write_bytes(b"too short\n")
    with pytest.raises(SecretError, match="damaged"):
        store.get("a")


def test_missing_key_with_existing_secrets_is_refused_and_not_replaced(store: SecretStore) -> None:
    store.set("a", "value-1")
    store.key_path.unlink()
    with pytest.raises(SecretError, match="missing"):
        store.get("a")
    with pytest.raises(SecretError, match="missing"):
        store.set("b", "value-2")  # a new key would make "a" unreadable for ever
    assert not store.key_path.exists()


@pytest.mark.parametrize("name", ["", "a/b", "../x", "x" * 65, "é", "a b", "a\n"])
def test_invalid_names_are_refused(store: SecretStore, name: str) -> None:
    with pytest.raises(ValueError, match="invalid secret name"):
        store.set(name, "value")
    with pytest.raises(ValueError, match="invalid secret name"):
        store.get(name)


@pytest.mark.parametrize("name", ["a", "billing_token", "proxy.fr-1", "X" * 64])
def test_valid_names(name: str) -> None:
    assert validate_secret_name(name) == name


def test_empty_value_is_refused(store: SecretStore) -> None:
    with pytest.raises(ValueError, match="empty"):
        store.set("a", "")


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(
    store: SecretStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.set("a", "value-1")
    before = store.path.read_bytes()

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cadenza.audit.secrets.os.replace", fail)
    with pytest.raises(OSError, match="No space"):
        store.set("b", "value-2")
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    assert sorted(p.name for p in store.data_dir.iterdir()) == [
        "secret.key",
        "secrets.json",
        "secrets.lock",
    ]
    assert store.names() == ["a"]


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            own = SecretStore(tmp_path)  # one store object per writer, as separate processes
            for i in range(5):
                own.set(f"s{n}-{i}", f"value-{n}-{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = SecretStore(tmp_path)
    assert len(store.names()) == 40
    assert store.get("s7-4") == "value-7-4"


def test_values_feed_the_redactor(store: SecretStore) -> None:
    store.set("smtp", VALUE)
    redactor = Redactor(store.values())
    assert redactor.redact_text(f"login with {VALUE} failed") == "login with *** failed"


@posix_only
def test_key_created_by_a_racing_process_is_kept(
    store: SecretStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = base64.b64encode(os.urandom(32)) + b"\n"
    real_link = os.link

    def racing_link(src: str, dst: str) -> None:
        # Another process wins the race just before this one links its key.
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, theirs)
        os.close(fd)
        real_link(src, dst)

    monkeypatch.setattr("cadenza.audit.secrets.os.link", racing_link)
    store.set("a", "value-1")
    assert store.key_path.read_bytes() == theirs
    assert store.get("a") == "value-1"
    assert [p.name for p in store.data_dir.iterdir() if p.name.endswith(".tmp")] == []


@posix_only
def test_key_is_created_on_a_file_system_without_hard_links(
    store: SecretStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("cadenza.audit.secrets.os.link", no_links)
    store.set("a", "value-1")
    assert stat.S_IMODE(store.key_path.stat().st_mode) == 0o600
    assert store.get("a") == "value-1"
