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
