"""Redaction (SPEC §10, RELIABILITY §3 item 37): secrets never survive, in any encoding seen."""

from __future__ import annotations

import base64
import html
import json
import re
import threading
import time
from collections import namedtuple
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cadenza.audit import REDACTED, Redactor, is_secret_key
from cadenza.audit.redact import WHOLE_TOKEN_BELOW
from cadenza.security import generate_token

SECRET = "s3cr3t/P@ss w0rd!"
OTHER = "hunter2-extra-long"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([SECRET, OTHER])


def _lower_hex(encoded: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)


# --- secret values in every encoding --------------------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        pytest.param(SECRET, id="raw"),
        pytest.param(quote(SECRET), id="quote"),
        pytest.param(quote(SECRET, safe=""), id="quote-safe-empty"),
        pytest.param(quote_plus(SECRET), id="quote_plus"),
        pytest.param(_lower_hex(quote(SECRET, safe="")), id="quote-lower-hex"),
        pytest.param(_lower_hex(quote_plus(SECRET)), id="quote_plus-lower-hex"),
        pytest.param(quote(quote(SECRET, safe=""), safe=""), id="double-url"),
        pytest.param(base64.b64encode(SECRET.encode()).decode(), id="base64"),
        pytest.param(base64.b64encode(SECRET.encode()).decode().rstrip("="), id="base64-nopad"),
        pytest.param(base64.urlsafe_b64encode(SECRET.encode()).decode(), id="base64-urlsafe"),
        pytest.param(
            base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="), id="urlsafe-nopad"
        ),
        pytest.param(json.dumps(SECRET)[1:-1], id="json"),
        pytest.param(html.escape(SECRET), id="html"),
    ],
)
@pytest.mark.reliability_case(37)
def test_every_encoding_of_a_secret_is_masked(redactor: Redactor, encoded: str) -> None:
    out = redactor.redact_text(f"before {encoded} after")
    assert out == f"before {REDACTED} after"


def test_json_escaped_secret_with_quotes_backslashes_and_non_ascii() -> None:
    secret = 'pa"ss\\wörd€'
    r = Redactor([secret])
    for dumped in (json.dumps({"v": secret}), json.dumps({"v": secret}, ensure_ascii=False)):
        out = r.redact_text(dumped)
        assert out == '{"v": "***"}'
    inner = json.dumps({"v": secret})
    assert r.redact_text(json.dumps({"event": inner})) == '{"event": "{\\"v\\": \\"***\\"}"}'
    assert r.redact_text(repr({"v": secret})) == "{'v': '***'}"
    assert r.redact_text(ascii(secret)) == "'***'"


@pytest.mark.parametrize("prefix", ["", "u", "us", "use", "user", "user:", "bob-the-builder:"])
def test_base64_of_a_secret_inside_a_longer_blob_is_masked_at_every_alignment(prefix: str) -> None:
    secret = "correct-horse-battery"
    blob = base64.b64encode(f"{prefix}{secret}; and more bytes after".encode()).decode()
    out = Redactor([secret]).redact_text(f"payload={blob} end")
    assert blob not in out
    assert out == f"payload={REDACTED} end"


def test_http_basic_authorization_is_masked_by_value_and_by_form() -> None:
    secret = "hunter2-extra-long"
    creds = base64.b64encode(f"alice:{secret}".encode()).decode()
    # Known secret: the base64 core is found inside user:password.
    assert Redactor([secret]).redact_text(f"x {creds} y") == "x *** y"
    # Unknown secret: the Authorization header and a bare Basic credential are masked anyway.
    r = Redactor()
    assert r.redact_text(f"Authorization: Basic {creds}") == "Authorization: Basic ***"
    assert r.redact_text(f"sent basic {creds} upstream") == "sent basic *** upstream"
    assert r.redact_text("Basic instructions follow") == "Basic instructions follow"


def test_secrets_shorter_than_four_characters_are_only_masked_as_whole_values() -> None:
    r = Redactor(["abc"])
    # As a substring, "abc" would wreck ordinary text: it stays.
    assert r.redact_text("abcdef and abc") == "abcdef and abc"
    # As a whole value (text, string leaf, bytes), it is masked.
    assert r.redact_text("abc") == REDACTED
    assert r.redact_text("  abc\n") == REDACTED
    assert r.redact_value({"x": "abc", "y": ["abc"], "z": b"abc"}) == {
        "x": REDACTED,
        "y": [REDACTED],
        "z": REDACTED.encode(),
    }


def test_longest_secret_wins_so_no_suffix_leaks() -> None:
    r = Redactor(["abcd1234", "abcd1234efgh5678"])
    assert r.redact_text("x abcd1234efgh5678 y") == "x *** y"
    assert r.redact_text("x abcd1234 y") == "x *** y"


def test_overlapping_occurrences_are_all_masked() -> None:
    r = Redactor(["abababababab", "1234wxyzWXYZ"])
    assert r.redact_text("ababababababab") == REDACTED
    r.add("zzzzZZZZ1234")
    assert r.redact_text("zzzzZZZZ1234wxyzWXYZ!") == "***!"
    # A short secret is a token: inside a longer word it is not one.
    assert Redactor(["abab"]).redact_text("ababab abab") == "ababab ***"


def test_secrets_added_later_are_masked_and_registration_is_idempotent() -> None:
    r = Redactor()
    assert r.redact_text("key late-secret-1") == "key late-secret-1"
    r.add("late-secret-1")
    r.add("late-secret-1")
    r.update([" padded-secret \n"])
    assert len(r) == 3  # the padded value and its stripped form
    assert r.redact_text("key late-secret-1") == "key ***"
    assert r.redact_text("x padded-secret y") == "x *** y"


def test_a_secret_value_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        Redactor([b"bytes"])  # type: ignore[list-item]


def test_concurrent_registration_and_redaction() -> None:
    r = Redactor()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(20):
                value = f"thread{n}-secret{i}"
                r.add(value)
                assert r.redact_text(f"<{value}>") == "<***>"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(r) == 160
    text = " ".join(f"thread{n}-secret{i}" for n in range(8) for i in range(20))
    assert set(r.redact_text(text).split()) == {REDACTED}


# --- structured values ----------------------------------------------------------------------


def test_nested_payload_is_redacted_by_value_and_by_key(redactor: Redactor) -> None:
    payload: dict[str, Any] = {
        "job": "sales-load",
        "rows": 42,
        "ok": True,
        "steps": [
            {"name": "tell", "response": f"echo {SECRET}", "elapsed": 0.25},
            ("tuple", quote_plus(SECRET)),
        ],
        "connection": {
            "url": "https://svc.example.org",
            "headers": {"Authorization": "Bearer abc", "X-Api-Key": "k", "Accept": "json"},
            "password": 123456,
            "cookies": {"sid": "abc"},
            "token": None,
            "password_set": True,
        },
    }
    before = json.dumps(payload)
    out = redactor.redact_value(payload)
    assert json.dumps(payload) == before  # the input is not modified
    assert out == {
        "job": "sales-load",
        "rows": 42,
        "ok": True,
        "steps": [
            {"name": "tell", "response": "echo ***", "elapsed": 0.25},
            ("tuple", REDACTED),
        ],
        "connection": {
            "url": "https://svc.example.org",
            "headers": {"Authorization": REDACTED, "X-Api-Key": REDACTED, "Accept": "json"},
            "password": REDACTED,
            "cookies": REDACTED,
            "token": None,
            "password_set": True,
        },
    }
    assert out is not payload and out["steps"] is not payload["steps"]


def test_sql_with_bind_parameters_in_a_dict() -> None:
    secret = "Tr0ub4dor&3"
    r = Redactor([secret])
    event = {
        "sql": "UPDATE accounts SET pw = :pw WHERE name = :name",
        "params": {"pw": secret, "name": "bob", "limit": 10},
        "rendered": f"UPDATE accounts SET pw = '{secret}' WHERE name = 'bob'",
    }
    assert r.redact_value(event) == {
        "sql": "UPDATE accounts SET pw = :pw WHERE name = :name",
        "params": {"pw": REDACTED, "name": "bob", "limit": 10},
        "rendered": "UPDATE accounts SET pw = '***' WHERE name = 'bob'",
    }


def test_header_tuples_bytes_namedtuples_sets_and_numbers() -> None:
    r = Redactor(["9876543210"])
    Pair = namedtuple("Pair", "name value")
    value = {
        "headers": [("Authorization", "Basic xyz"), ("Accept", "text/html")],
        "body": b"id=9876543210&x=\xff",
        "pair": Pair("a", "9876543210"),
        "tags": {"ok", "9876543210"},
        "frozen": frozenset({"9876543210"}),
        "account": 9876543210,
        "count": 7,
        "ratio": 0.5,
    }
    out = r.redact_value(value)
    assert out["headers"] == [("Authorization", REDACTED), ("Accept", "text/html")]
    assert out["body"] == b"id=***&x=\xff"
    assert out["pair"] == Pair("a", REDACTED) and type(out["pair"]) is Pair
    assert out["tags"] == {"ok", REDACTED}
    assert out["frozen"] == frozenset({REDACTED})
    assert out["account"] == REDACTED
    assert out["count"] == 7 and out["ratio"] == 0.5
    assert r.redact_value(10**5000) == REDACTED  # too long to print: not shown


def test_other_objects_are_kept_unless_their_text_holds_a_secret() -> None:
    class Conn:
        def __str__(self) -> str:
            return "Conn(postgresql://app:letmein99@db/prod)"

    class Plain:
        def __str__(self) -> str:
            return "plain"

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    plain = Plain()
    out = Redactor(["letmein99"]).redact_value([Conn(), plain, Broken()])
    assert out[0] == "Conn(postgresql://***@db/prod)"
    assert out[1] is plain
    assert out[2] == REDACTED


def test_dict_keys_that_are_secrets_are_masked_and_cycles_do_not_recurse_forever() -> None:
    r = Redactor(["zebra-1234"])
    loop: list[Any] = ["x"]
    loop.append(loop)
    assert r.redact_value({"zebra-1234": 1, "name": "zebra-1234"}) == {
        REDACTED: 1,
        "name": REDACTED,
    }
    assert r.redact_value(loop) == ["x", REDACTED]


@pytest.mark.parametrize(
    ("key", "secret_looking"),
    [
        ("password", True),
        ("DB_PASSWORD", True),
        ("passwd", True),
        ("pwd", True),
        ("client_secret", True),
        ("access_token", True),
        ("Authorization", True),
        ("Proxy-Authorization", True),
        ("api_key", True),
        ("apiKey", True),
        ("X-Api-Key", True),
        ("Set-Cookie", True),
        ("private_key", True),
        ("credentials", True),
        ("session_id", True),
        ("tokens_used", True),  # documented false positive: mask when in doubt
        ("name", False),
        ("rows", False),
        ("author", False),
        ("url", False),
    ],
)
def test_secret_looking_keys(key: str, secret_looking: bool) -> None:
    assert is_secret_key(key) is secret_looking


# --- URL user-info --------------------------------------------------------------------------


USERINFO_CASES = [
    (
        "connecting to postgresql+psycopg://app:pa55@db.local:5432/prod now",
        "connecting to postgresql+psycopg://***@db.local:5432/prod now",
    ),
    ("proxy http://user:p@ss@10.1.2.3:3128 up", "proxy http://***@10.1.2.3:3128 up"),
    ("clone https://ghp_token123@github.com/x.git", "clone https://***@github.com/x.git"),
    ("redis://:onlypass@cache:6379/0", "redis://***@cache:6379/0"),
    ('{"url": "https:\\/\\/u:p@h\\/x"}', '{"url": "https:\\/\\/***@h\\/x"}'),
    (
        "next=https%3A%2F%2Fu%3Ap%40h.example%2Fx",
        "next=https%3A%2F%2F***%40h.example%2Fx",
    ),
    ("a http://a:b@x and ftp://c:d@y", "a http://***@x and ftp://***@y"),
    (
        "plain https://example.org/a?b=c@d no userinfo",
        "plain https://example.org/a?b=c@d no userinfo",
    ),
    ("mail bob@example.org", "mail bob@example.org"),
]


@pytest.mark.parametrize(("text", "expected"), USERINFO_CASES)
def test_url_userinfo_in_free_text(text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected


# --- key=value and credential forms in free text --------------------------------------------


KEY_VALUE_CASES = [
    ("GET /cb?access_token=abc123&page=2", "GET /cb?access_token=***&page=2"),
    ("user=bob password=hunter2 retry=1", "user=bob password=*** retry=1"),
    ('{"api_key": "zzz", "n": 1}', '{"api_key": "***", "n": 1}'),
    ("{'client_secret': 'zzz', 'n': 1}", "{'client_secret': '***', 'n': 1}"),
    ('{"log": "token=xyz pass=\\"q\\""}', '{"log": "token=*** pass=\\"q\\""}'),
    ('{"inner": "{\\"password\\": \\"q\\"}"}', '{"inner": "{\\"password\\": \\"***\\"}"}'),
    ('"cookies": {"sid": "abc", "x": [1]}, "n": 2', '"cookies": ***, "n": 2'),
    ("db:\n  password: s3cret value\n  host: h", "db:\n  password: ***\n  host: h"),
    ("Authorization: Bearer eyJ.abc.def\r\nHost: x", "Authorization: Bearer ***\r\nHost: x"),
    ("Cookie: sid=abc; theme=dark\nnext", "Cookie: ***\nnext"),
    ("curl -H 'X-Api-Key: k-123' https://x", "curl -H 'X-Api-Key: ***' https://x"),
    ('"msg": "invalid token: abc", "n": 1', '"msg": "invalid token: ***", "n": 1'),
    ("ALTER USER bob WITH PASSWORD 'p4ss';", "ALTER USER bob WITH PASSWORD '***';"),
    ("CREATE USER x IDENTIFIED BY 'p4ss';", "CREATE USER x IDENTIFIED BY '***';"),
    ("export PGPASSWORD=abc", "export PGPASSWORD=***"),
    ("sent Bearer abcdef123456 upstream", "sent Bearer *** upstream"),
    ("password=null token=None secret=false", "password=null token=None secret=false"),
    ('{"password": null, "token": true}', '{"password": null, "token": true}'),
]


@pytest.mark.parametrize(("text", "expected"), KEY_VALUE_CASES)
def test_key_value_forms_in_free_text(text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the token expired; please log in again",
        "password is wrong",
        "tokenizer loaded in 3 s",
        "bearer authentication failed",
        "session started",
        "if token == expected: pass",
        "see https://example.org/session/42",
    ],
)
def test_ordinary_prose_is_left_alone(text: str) -> None:
    assert Redactor().redact_text(text) == text


@pytest.mark.parametrize(("text", "expected"), USERINFO_CASES + KEY_VALUE_CASES)
def test_long_texts_take_the_same_rules_as_short_ones(text: str, expected: str) -> None:
    # Short texts are pre-checked with combined patterns, long ones scanned rule by rule.
    padding = "lorem ipsum " * 60
    r = Redactor([OTHER])
    assert r.redact_text(f"{padding}{text}\n{OTHER}") == f"{padding}{expected}\n***"


def test_api_tokens_and_private_keys_are_masked_without_registration() -> None:
    token = generate_token()
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----"
    out = Redactor().redact_text(f"created {token}\n{pem}\n")
    assert token not in out and "b3BlbnNzaC1rZXk" not in out
    assert out == (
        "created ***\n-----BEGIN OPENSSH PRIVATE KEY-----***-----END OPENSSH PRIVATE KEY-----\n"
    )


def test_redaction_is_idempotent_on_its_own_output(redactor: Redactor) -> None:
    text = f"password={OTHER} url=https://u:{OTHER}@h Authorization: Bearer {OTHER}"
    once = redactor.redact_text(text)
    assert once == "password=*** url=https://***@h Authorization: Bearer ***"
    assert redactor.redact_text(once) == once


def test_large_and_hostile_inputs_stay_linear() -> None:
    r = Redactor([f"secret-number-{i:03d}-xyz" for i in range(50)])
    blob = base64.b64encode(bytes(range(256)) * 3000).decode()  # ~1 MB of base64
    inputs = [
        blob,
        "a" * 1_000_000,
        "token=x " * 20_000,
        "://" + "a" * 200_000,
        "http://" * 30_000,
        '"token": "' + "b" * 200_000,
        "%41" * 100_000,
    ]
    started = time.monotonic()
    for text in inputs:
        assert r.redact_text(text)
    # Quadratic behaviour on any of these would take minutes; linear takes well under 1 s each.
    assert time.monotonic() - started < 20


# --- property: no encoding of a secret survives ---------------------------------------------

_printable = st.characters(
    blacklist_categories=("Cc", "Cs", "Co", "Cn", "Zl", "Zp"), blacklist_characters="*"
)


def _encodings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "raw": secret,
        "quote": quote(secret, safe=""),
        "quote/": quote(secret),
        "quote_plus": quote_plus(secret),
        "quote-lower": _lower_hex(quote(secret, safe="")),
        "b64": base64.b64encode(raw).decode(),
        "b64-nopad": base64.b64encode(raw).decode().rstrip("="),
        "b64url": base64.urlsafe_b64encode(raw).decode(),
        "json": json.dumps(secret)[1:-1],
    }


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(_printable, min_size=4, max_size=40),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    form=st.sampled_from(sorted(_encodings("xxxx"))),
    long_text=st.booleans(),
)
def test_no_encoding_of_a_secret_survives(
    secret: str, before: str, after: str, form: str, long_text: bool
) -> None:
    embedded = _encodings(secret)[form]
    if len(secret) < WHOLE_TOKEN_BELOW:  # a short secret is masked where it is a token
        assume(not any(e in before or e in after for e in _encodings(secret).values()))
        before, after = before + " ", " " + after
    if long_text:  # past the short-text fast path
        before = "lorem ipsum " * 50 + before
    out = Redactor([secret]).redact_text(before + embedded + after)
    for name, encoded in _encodings(secret).items():
        assert encoded not in out, f"{name} form of the secret survived {form}: {out!r}"


@pytest.mark.parametrize(("url", "shown"), [
    ("http://user:pass@127.0.0.1:3128", "http://***@127.0.0.1:3128"),
    ("socks5://u:p@host:1080", "socks5://***@host:1080"),
    ("socks5h://only-user@host:1080/", "socks5h://***@host:1080/"),
    ("http://u:p%40ss@h:3128", "http://***@h:3128"),
    ("http://127.0.0.1:3128", "http://127.0.0.1:3128"),
    ("proxy http://a:b@h:1 and https://c:d@k:2 refused",
     "proxy http://***@h:1 and https://***@k:2 refused"),
])
def test_redact_url_is_the_redactors_mask_of_a_url(url: str, shown: str) -> None:
    from cadenza.audit import redact_url

    assert redact_url(url) == shown
    assert Redactor([]).redact_text(url) == shown
