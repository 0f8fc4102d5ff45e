"""The one cut of stored text: after redaction, never before.

A text cut before it is redacted can end in the first characters of a secret, which the
redactor (it looks for whole secrets) no longer recognises. So the store redacts a log
line, a step's error or a reason whole, then cuts it here; a cut inside ``***`` leaves
asterisks only.
"""

from __future__ import annotations

#: A run log message longer than this (after redaction) is cut, with a note of its length.
MAX_MESSAGE = 64 * 1024


def cut_redacted(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text``, already redacted, cut to ``limit`` characters with a note of its length.

    Cut only after redaction: a secret cut in two before it is redacted leaves a prefix that
    the redactor, which looks for whole secrets, no longer recognises. A cut inside a
    ``***`` leaves asterisks only."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [cut: {len(text)} characters]"


#: The longest secret value (64 KiB of UTF-8 is at most this many characters): a cut made
#: before redaction is pushed this far at most.
LONGEST_SECRET = 64 * 1024


def cut_before_redaction(text: str, limit: int, mark: str = "…") -> str:
    """``text`` cut near ``limit`` characters where it has to be cut *before* redaction (a
    step's excerpt of an answer, the SQL of a DEBUG line), followed by ``mark`` when cut.

    The cut is pushed forward to the next blank (at most :data:`LONGEST_SECRET` characters
    on), never back: a secret without a blank that starts before the limit is kept whole,
    so the redactor, which looks for whole secrets, still masks all of it. A secret that
    holds a blank can still be cut at one of its blanks (docs/security.md)."""
    if len(text) <= limit:
        return text
    end = limit
    stop = min(len(text), limit + LONGEST_SECRET)
    while end < stop and not text[end].isspace():
        end += 1
    if end >= len(text):
        return text
    return text[:end] + mark
