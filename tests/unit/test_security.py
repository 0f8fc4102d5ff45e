"""Passwords, API tokens and user names (SPEC §12)."""

from __future__ import annotations

import hashlib
import re

import pytest
from argon2 import PasswordHasher

from cadenza.security import (
    generate_password,
    generate_token,
    hash_password,
    hash_token,
    needs_rehash,
    validate_username,
    verify_password,
)


def test_hash_is_argon2id_salted_and_verifies() -> None:
    first = hash_password("correct horse")
    second = hash_password("correct horse")
    assert first.startswith("$argon2id$")
    assert first != second  # a fresh salt each time
    assert "correct horse" not in first
    assert verify_password(first, "correct horse") is True
    assert verify_password(first, "correct horsE") is False
    assert verify_password(first, "") is False


@pytest.mark.parametrize("bad_hash", ["", "not a hash", "$argon2id$v=19$m=1$broken", "$2b$12$x"])
def test_malformed_hashes_never_verify(bad_hash: str) -> None:
    assert verify_password(bad_hash, "anything") is False
    assert needs_rehash(bad_hash) is True


def test_needs_rehash_only_for_other_parameters() -> None:
    assert needs_rehash(hash_password("pw-123456")) is False
    weak = PasswordHasher(time_cost=1, memory_cost=8 * 1024, parallelism=1).hash("pw-123456")
    assert verify_password(weak, "pw-123456") is True
    assert needs_rehash(weak) is True


@pytest.mark.parametrize("bad", ["", "x" * 4097])
def test_empty_or_huge_passwords_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="password"):
        hash_password(bad)


@pytest.mark.reliability_case(31)
def test_generated_passwords_are_long_random_and_url_safe() -> None:
    passwords = {generate_password() for _ in range(50)}
    assert len(passwords) == 50
    for pw in passwords:
        assert len(pw) >= 16
        assert re.fullmatch(r"[A-Za-z0-9_\-]+", pw)


def test_tokens_are_prefixed_random_and_stored_as_sha256() -> None:
    tokens = {generate_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert re.fullmatch(r"cdz_[A-Za-z0-9_\-]{43}", token)
    token = next(iter(tokens))
    assert hash_token(token) == hashlib.sha256(token.encode()).hexdigest()
    assert hash_token("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert hash_token(token) != hash_token(token + "x")


@pytest.mark.parametrize("name", ["admin", "a", "jane.doe@example.org", "ops_bot-2", "X" * 64])
def test_valid_usernames(name: str) -> None:
    assert validate_username(name) == name


@pytest.mark.parametrize(
    "name", ["", "x" * 65, "jane doe", "a/b", "<script>", "ädmin", "a\n", "admin;drop"]
)
def test_invalid_usernames_say_what_is_allowed(name: str) -> None:
    with pytest.raises(ValueError, match=r"invalid user name .*letters, digits"):
        validate_username(name)
