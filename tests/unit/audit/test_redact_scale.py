"""Redaction with many secrets and with a 64 KiB one: every encoding is still found, and
the cost per text does not grow with the number of secrets."""

from __future__ import annotations

import base64
import json
import random
import string
import time
from urllib.parse import quote, quote_plus

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cadenza.audit import Redactor
from cadenza.audit.redact import WHOLE_TOKEN_BELOW

_ALPHABET = string.ascii_letters + string.digits + "!#$%&()*+,-./:;<=>?@[]^_{|}~ é€"
_rand = random.Random(7)
MANY = ["".join(_rand.choices(_ALPHABET, k=_rand.randint(8, 48))) for _ in range(300)]


def _forms(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "raw": secret,
        "quote": quote(secret, safe=""),
        "quote_plus": quote_plus(secret),
        "b64": base64.b64encode(raw).decode(),
        "b64url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "json": json.dumps(secret)[1:-1],
        "in-blob": base64.b64encode(b"prefix:" + raw + b":suffix").decode(),
    }


_printable = st.characters(
    blacklist_categories=("Cc", "Cs", "Co", "Cn", "Zl", "Zp"), blacklist_characters="*"
)
many = Redactor(MANY)


@settings(max_examples=300, deadline=None)
@given(
    secret=st.one_of(st.sampled_from(MANY), st.text(_printable, min_size=4, max_size=40)),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    form=st.sampled_from(sorted(_forms("xxxx"))),
    long_text=st.booleans(),
)
def test_among_many_secrets_no_encoding_of_one_survives(
    secret: str, before: str, after: str, form: str, long_text: bool
) -> None:
    redactor = many if secret in MANY else Redactor([*MANY, secret])
    embedded = _forms(secret)[form]
    if len(secret) < WHOLE_TOKEN_BELOW:  # a short secret is masked where it is a token
        assume(not any(e in before or e in after for e in _forms(secret).values()))
        before, after = before + " ", " " + after
    if long_text:  # past the short-text path
        before = "lorem ipsum " * 50 + before
    out = redactor.redact_text(before + embedded + after)
    for name, encoded in _forms(secret).items():
        if name != "in-blob":
            assert encoded not in out, f"{name} form survived {form}: {out!r}"


def test_a_64_kib_secret_is_found_in_its_forms() -> None:
    rand = random.Random(3)
    lines = ["".join(rand.choices(string.ascii_letters + string.digits + "+/", k=64))
             for _ in range(1000)]
    secret = "-----BEGIN BLOB-----\n" + "\n".join(lines) + "\n-----END BLOB-----"
    assert len(secret.encode()) <= 64 * 1024
    redactor = Redactor([secret, "another-secret-1"])
    for form in ("raw", "quote", "json", "b64"):
        encoded = _forms(secret)[form]
        out = redactor.redact_text("before " + encoded + " after")
        assert out.startswith("before *** ") and len(out) < 20, form
    # A line of it alone is no secret; it stays.
    assert redactor.redact_text(f"x {lines[5]} y") == f"x {lines[5]} y"


def test_the_cost_per_text_does_not_grow_with_the_number_of_secrets() -> None:
    texts = [f"loaded {i} rows from sales/2026-11.csv in 0.{i % 10}2s; GET "
             f"https://api.example.org/v1/items?page={i} -> 200" for i in range(300)]

    def cost(redactor: Redactor) -> float:
        redactor.redact_text("warm up: compile the patterns")
        started = time.perf_counter()
        for text in texts:
            redactor.redact_text(text)
        return time.perf_counter() - started

    few = min(cost(Redactor(MANY[:2])) for _ in range(3))
    rand = random.Random(11)
    thousand = [*MANY, *("".join(rand.choices(_ALPHABET, k=rand.randint(8, 48)))
                         for _ in range(700))]
    lots = min(cost(Redactor(thousand)) for _ in range(3))
    # One alternation of every secret's base64 forms, tried at each position of a text,
    # made this about 500 times slower; indexes keep it within a small factor.
    assert lots < 20 * few + 0.05, (lots, few)
