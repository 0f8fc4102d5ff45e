"""The cuts of text: after redaction (the store's), and before it (a step's excerpt)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cadenza.audit import Redactor
from cadenza.domain.texts import LONGEST_SECRET, cut_before_redaction, cut_redacted

SECRET = "Kq7-Zx91-Lm3P-w8Rt"


def test_cut_redacted_keeps_short_texts_and_notes_the_length() -> None:
    assert cut_redacted("abc", 3) == "abc"
    assert cut_redacted("abcdef", 3) == "abc... [cut: 6 characters]"


def test_cut_before_redaction_never_keeps_part_of_a_secret() -> None:
    """Every cut offset across the secret: the redacted excerpt holds the mask or nothing of
    it, never its first characters."""
    text = "answer: " + SECRET + " and the rest of the body"
    start = len("answer: ")
    for limit in range(start - 1, start + len(SECRET) + 2):
        shown = Redactor([SECRET]).redact_text(cut_before_redaction(text, limit))
        assert not any(SECRET[:n] in shown for n in range(4, len(SECRET) + 1)), (limit, shown)
        assert shown.startswith("answer:")
        # Today's slicing, for comparison, keeps a prefix as soon as 4 characters are in.
        if limit >= start + 4 and limit < start + len(SECRET):
            assert SECRET[:limit - start] in Redactor([SECRET]).redact_text(text[:limit])


def test_the_cut_moves_on_to_the_next_blank_and_no_further_than_a_secret() -> None:
    assert cut_before_redaction("one two three", 5) == "one two…"
    assert cut_before_redaction("one two three", 5, "") == "one two"
    assert cut_before_redaction("one two", 3) == "one…"
    assert cut_before_redaction("onetwo", 3) == "onetwo"
    long = "x" * (3 * LONGEST_SECRET)
    assert cut_before_redaction(long, 10, "") == "x" * (10 + LONGEST_SECRET)


_NO_BLANK = st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp"))


@given(secret=st.text(_NO_BLANK, min_size=4, max_size=40),
       before=st.text(max_size=60), after=st.text(max_size=60), limit=st.integers(0, 200))
def test_a_secret_without_a_blank_is_kept_whole_or_not_at_all(
        secret: str, before: str, after: str, limit: int) -> None:
    text = before + secret + after
    at = len(before)
    kept = cut_before_redaction(text, limit, "")
    assert text.startswith(kept)
    assert len(kept) <= at or len(kept) >= at + len(secret)
