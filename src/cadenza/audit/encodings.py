"""The forms a secret value takes once it has been encoded, as regular expressions.

A secret rarely leaks as itself only: it travels URL-encoded in a query string, JSON-escaped
inside a payload, base64-encoded inside an ``Authorization: Basic`` header. This module turns
one secret into patterns that find it in each of those forms; :mod:`cadenza.audit.redact`
uses them.

Two kinds of pattern are built:

* :func:`secret_pattern` — one regular expression per secret, in which every character may
  appear raw or in any of its *per-character* encodings: percent-encoding (single and double,
  upper- or lower-case hex, ``+`` for a space), JSON and Python string escapes (single and
  double), and HTML character references. Because every one of these encodings works
  character by character, a single pattern matches the raw value, ``quote``, ``quote_plus``,
  ``json.dumps`` and mixes of them.
* :func:`base64_cores` — base64 is not per-character, so a secret is found in a longer base64
  blob through the characters that depend on the secret alone, for each of the three byte
  alignments and for both alphabets (standard and URL-safe); the caller masks the whole blob.

Patterns are built without ``re.IGNORECASE`` and start with a set of literal characters, so
that the regular expression engine can skip quickly over text that cannot start a match.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
from urllib.parse import quote, quote_plus

#: Secrets shorter than this are not searched for inside longer text (see ``docs/security.md``):
#: a two- or three-character value occurs by chance in ordinary text so often that masking it
#: would destroy logs while protecting little. Such secrets are still masked as whole values.
MIN_SUBSTRING_LENGTH = 4

#: A base64 core shorter than this is not searched for: a four-character core occurs by chance
#: about once in 16 million positions, too often for multi-megabyte base64 attachments.
MIN_BASE64_CORE = 5

#: The characters of a base64 blob (both alphabets, and padding).
BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=")

_HEX_ESCAPE = re.compile(
    r"%[0-9A-Fa-f]{2}|\\[ux][0-9A-Fa-f]{2,4}|\\U[0-9A-Fa-f]{8}|&#x[0-9A-Fa-f]+;"
)
_STD_TO_URLSAFE = str.maketrans("+/", "-_")


def _hex_case_variants(encoded: str) -> set[str]:
    """``encoded`` with the hex digits of its escapes in upper case, and in lower case."""

    def recase(m: re.Match[str], case: str) -> str:
        s = m.group(0)
        keep = 3 if s.startswith("&#x") else 2 if s[0] == "\\" else 1
        return s[:keep] + (s[keep:].upper() if case == "upper" else s[keep:].lower())

    def upper(m: re.Match[str]) -> str:
        return recase(m, "upper")

    def lower(m: re.Match[str]) -> str:
        return recase(m, "lower")

    return {encoded, _HEX_ESCAPE.sub(upper, encoded), _HEX_ESCAPE.sub(lower, encoded)}


def _json_escapes(c: str) -> set[str]:
    """How JSON writes ``c`` inside a string, once and twice escaped (a JSON string in JSON)."""
    once = {json.dumps(c)[1:-1], json.dumps(c, ensure_ascii=False)[1:-1]}
    if c == "/":
        once.add("\\/")  # JSON allows an escaped solidus, and some encoders emit it
    twice = {json.dumps(e)[1:-1] for e in once} | {
        json.dumps(e, ensure_ascii=False)[1:-1] for e in once
    }
    return once | twice


def _python_escapes(c: str) -> set[str]:
    """How ``repr`` and ``ascii`` write ``c`` inside a quoted string (either quote style)."""
    forms = {ascii(c)[1:-1], repr(c)[1:-1]}
    if c in "'\"":
        forms.add("\\" + c)  # a quote inside a string that holds both kinds of quote
    return forms


def _html_escapes(c: str) -> set[str]:
    """HTML character references for ``c`` (as ``html.escape`` and Jinja/markupsafe write them)."""
    forms = {html.escape(c, quote=True)}
    if c in "&<>\"'":
        forms |= {f"&#{ord(c)};", f"&#x{ord(c):x};"}
    return forms


def char_forms(c: str) -> set[str]:
    """Every string that stands for the single character ``c`` in the encodings we know."""
    urls: set[str] = set()
    for safe in ("", "/"):
        for form in (quote(c, safe=safe), quote_plus(c, safe=safe)):
            urls |= _hex_case_variants(form)
    # Double percent-encoding (a URL inside a query parameter) of every single form.
    urls |= {quote(u, safe="") for u in urls} | {quote_plus(u, safe="") for u in urls}
    out = {c}
    for form in urls | _json_escapes(c) | _python_escapes(c) | _html_escapes(c):
        out |= _hex_case_variants(form)
    return out


@functools.lru_cache(maxsize=4096)
def _char_group(c: str) -> str:
    """A regular expression group matching ``c`` in any of its forms, longest form first."""
    forms = sorted(char_forms(c), key=lambda f: (-len(f), f))
    if len(forms) == 1:
        return re.escape(forms[0])
    return "(?:" + "|".join(re.escape(f) for f in forms) + ")"


def secret_regex(secret: str) -> str:
    """The source of :func:`secret_pattern` for ``secret``."""
    return "".join(_char_group(c) for c in secret)


def secret_pattern(secret: str) -> re.Pattern[str]:
    """A compiled pattern matching ``secret`` raw, URL-, JSON-, Python- or HTML-escaped."""
    return re.compile(secret_regex(secret))


def base64_cores(secret: str) -> set[str]:
    """The base64 characters that only ``secret`` decides, wherever it sits in a blob.

    A value that starts at byte ``k`` (mod 3) of a base64-encoded blob shares its first
    output characters with the bytes before it, and its last ones with the bytes after it.
    The characters in between depend on the value alone: those are its *core* for that
    alignment. Three alignments times two alphabets give up to six cores; padding is never
    part of a core, so padded and unpadded blobs are both found. Cores shorter than
    :data:`MIN_BASE64_CORE` are left out.
    """
    data = secret.encode("utf-8")
    cores: set[str] = set()
    for k, skip in ((0, 0), (1, 2), (2, 3)):
        encoded = base64.b64encode(b"\0" * k + data).decode("ascii")
        end = (8 * (k + len(data))) // 6
        core = encoded[skip:end]
        if len(core) >= MIN_BASE64_CORE:
            cores.add(core)
            cores.add(core.translate(_STD_TO_URLSAFE))
    return cores
