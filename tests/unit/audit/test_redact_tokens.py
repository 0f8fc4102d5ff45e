"""Short secrets are masked as whole tokens; long ones wherever they appear."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

from hypothesis import given
from hypothesis import strategies as st

from cadenza.audit import Redactor
from cadenza.audit.redact import WHOLE_TOKEN_BELOW


def test_a_short_secret_does_not_garble_the_words_it_is_part_of() -> None:
    r = Redactor(["file", "admin1"])
    assert (r.redact_text("No such file or directory: profile.txt, filename, admin12")
            == "No such *** or directory: profile.txt, filename, admin12")
    assert r.redact_text("user admin1 logged in; admin1x is another") == \
        "user *** logged in; admin1x is another"


def test_a_short_secret_is_still_masked_where_it_stands_as_a_token() -> None:
    secret = "abc123"
    r = Redactor([secret])
    for text in (f"Bearer {secret}", f"?token={secret}&page=2", f"x={secret};",
                 json.dumps({"v": secret}), json.dumps(json.dumps({"v": secret})),
                 f"https://{secret}@github.com/x", f"({secret})", f"{secret}.",
                 json.dumps(f"line one\n{secret}"), "q=" + quote(f"={secret}&", safe=""),
                 quote_plus(f"a {secret} b"), f"user:{secret}", f"<td>{secret}</td>"):
        out = r.redact_text(text)
        assert secret not in out and "***" in out, (text, out)


def test_a_long_secret_is_masked_even_inside_a_longer_alphanumeric_run() -> None:
    secret = "Zq9xK2mW7pLr"  # WHOLE_TOKEN_BELOW characters
    assert len(secret) == WHOLE_TOKEN_BELOW
    r = Redactor([secret])
    assert r.redact_text(f"id=x{secret}y0") == "id=x***y0"
    short = secret[:-1]
    assert Redactor([short]).redact_text(f"id=x{short}y0") == f"id=x{short}y0"


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8)


@given(secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4,
                      max_size=WHOLE_TOKEN_BELOW - 1),
       before=_WORD, after=_WORD, sep=st.sampled_from([" ", "=", "&", ",", "/", "\"", ":"]))
def test_short_secrets_by_token_boundaries(secret: str, before: str, after: str,
                                           sep: str) -> None:
    r = Redactor([secret])
    inside = f"{before}{secret}{after}"
    assert r.redact_text(f"see {inside} here") == f"see {inside} here" or \
        secret in before or secret in after
    shown = r.redact_text(f"{before}{sep}{secret}{sep}{after}")
    assert secret not in shown
