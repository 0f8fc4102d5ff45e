"""Redaction: secrets are replaced by ``***`` before anything is written or shown.

A :class:`Redactor` knows the secret values of the installation and masks, in text and in
structured values:

1. every known secret value, raw or encoded (percent-encoding, JSON and Python string
   escapes, HTML references, base64 — also inside a longer base64 blob);
2. the value under a key that looks secret (``password``, ``token``, ``cookie`` ...);
3. the user-info of URLs (``scheme://user:pass@host`` becomes ``scheme://***@host``);
4. in free text, ``key=value``, ``"key": "value"``, ``key: value`` and SQL ``PASSWORD '...'``
   forms for those keys, ``Bearer``/``Basic`` credentials, Cadenza API tokens and PEM private
   key blocks.

The rules and their limits are described in ``docs/security.md``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any

from cadenza.audit.encodings import (
    BASE64_CHARS,
    MIN_BASE64_CORE,
    MIN_SUBSTRING_LENGTH,
    base64_cores,
    secret_pattern,
    secret_regex,
)

REDACTED = "***"

#: A key whose lower-cased name contains one of these holds a secret (substring match, so
#: ``X-Api-Key``, ``db.password``, ``PGPASSWORD`` and ``session_id`` all count).
SECRET_KEY_WORDS: tuple[str, ...] = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "cookie",
    "private_key",
    "private-key",
    "privatekey",
    "credential",
    "session",
)

#: Values that say whether a secret is set, not what it is; they stay visible.
_HARMLESS_WORDS = frozenset({"null", "none", "true", "false", "nil", REDACTED})

_MAX_VALUE_SCAN = 100_000  # bound on the scan for the end of a quoted or bracketed value


def redact_url(text: str) -> str:
    """``text`` (a URL, or text holding URLs) with the user-info of every URL replaced by
    ``***``: ``http://user:pass@127.0.0.1:3128`` becomes ``http://***@127.0.0.1:3128``,
    ``socks5://u:p@host:1080`` ``socks5://***@host:1080``. The one mask of a proxy URL
    (a route's) wherever it is shown — health checks, a route's faults, events, pages, API
    answers, the CLI — and the same as :meth:`Redactor.redact_text` gives for such a URL."""
    if "@" not in text and "%40" not in text.upper():
        return text
    return _apply(text, list(_userinfo_spans(text)))


#: A secret shorter than this is masked only where it stands as a token: not inside a
#: longer run of word characters (``\\w``) on a side where it starts or ends with one. A
#: short value ("file", "admin1") is often part of ordinary words ("profile", "admin12");
#: a longer one is random enough that it is masked wherever it appears, even inside a
#: longer alphanumeric run (where a token glued to other characters would otherwise leak).
WHOLE_TOKEN_BELOW = 12


#: Where a token may start: after a non-word character, or right after an escape that
#: ends in one (``%3D``, ``\\n``, ``\\u00e9``, ``\\x3d``) — a value in a query string or a
#: JSON string is still a token.
_TOKEN_START = (r"(?:(?<!\w)|(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrtbf])"
                r"|(?<=\\u[0-9A-Fa-f]{4})|(?<=\\x[0-9A-Fa-f]{2}))")


def _token_pattern(secret: str) -> re.Pattern[str]:
    """The pattern of ``secret`` (:func:`secret_pattern`), bounded by ``\\w`` on the sides
    where a short secret starts or ends with a word character."""
    if len(secret) >= WHOLE_TOKEN_BELOW:
        return secret_pattern(secret)
    head = _TOKEN_START if re.match(r"\w", secret[0]) else ""
    tail = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return re.compile(head + secret_regex(secret) + tail)


def is_secret_key(name: str) -> bool:
    """True when ``name`` (a mapping key, header or parameter name) looks like it holds a secret."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_KEY_WORDS)


# --- free-text rules -------------------------------------------------------------------------
# Patterns marked "lowered" run on ``text.lower()`` (same offsets when the length is unchanged,
# see _Scan) so that they need no IGNORECASE, which would disable the engine's fast scan.

_SQL_IDENTIFIED_BY = re.compile(r"identified[ \t]+by")  # lowered; CREATE USER x IDENTIFIED BY '…'
_KEY_TAIL = re.compile(
    r"""[\w.\-]*(?P<close>\\?["'])?"""
    r"""(?:[ \t]*(?P<sep>=>|=(?!=)|:(?![:/]))[ \t]*|[ \t]+(?=\\?["']))"""
)
_AUTH_SCHEME = re.compile(
    r"(?:bearer|basic|digest|token|negotiate|ntlm|bot|apikey)[ \t]+"
)  # lowered
_BEARER = re.compile(r"bearer[ \t]+(?P<v>[a-z0-9\-._~+/]{8,}=*)")  # lowered
_BASIC = re.compile(r"basic[ \t]+(?P<v>[a-z0-9+/_\-]{4,}={0,2})")  # lowered
_API_TOKEN = re.compile(r"cdz_[A-Za-z0-9_\-]{20,}")
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY[A-Z0-9 ]*)-----"
    r"(?P<v>.*?)(?=-----END (?P=kind)-----|\Z)",
    re.DOTALL,
)
_USERINFO = re.compile(r"""(?P<sep>:(?:\\?/){2})(?P<ui>(?:[^\s/?#"'<>\\]|\\[^/\s])+)@""")
_USERINFO_ENCODED = re.compile(
    r"%3[Aa]%2[Ff]%2[Ff](?P<ui>(?:[^\s/?#@\"'<>&%]|%(?!2[Ff]|3[Ff]|23|40)[0-9A-Fa-f]{2})+)%40"
)
_UNQUOTED_END = re.compile(r"""[\s&;,)}\]"'<>]""")


#: Below this length a text is first checked with one combined pattern per rule family, and
#: skipped by families that cannot match: one search beats dozens of scans on short strings
#: (the many small leaves of a structured value), while dozens of fast literal-prefixed scans
#: beat one wide alternation on long texts.
_SHORT_TEXT = 512

#: Everything that can start a free-text rule, for the quick check of short texts (lowered).
_RULE_TRIGGER = re.compile(
    "|".join(
        [
            *(re.escape(w) for w in SECRET_KEY_WORDS),
            "identified",
            "bearer",
            "basic",
            "cdz_",
            "-----begin",
            ":/",
            r":\\/",
            "%3a%2f%2f",
        ]
    )
)


#: Characters that every encoding the patterns know leaves as they are (``char_forms(c)``
#: is ``{c}``): a run of them in a secret appears literally in any encoded form of it.
_LITERAL_CHARS = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-._~")


def _anchor(secret: str) -> str:
    """The longest run of :data:`_LITERAL_CHARS` in ``secret`` ("" when it has none).

    Any text holding the secret, raw or encoded, holds this run as it is: one ``str``
    search, fast whatever the number of secrets, rules a secret out before its pattern
    runs. Without it, short texts were checked against one alternation of every pattern,
    whose cost grows with each secret at every position of the text."""
    best = start = 0
    best_start = 0
    for i, c in enumerate(secret):
        if c not in _LITERAL_CHARS:
            start = i + 1
        elif i + 1 - start > best:
            best, best_start = i + 1 - start, start
    return secret[best_start:best_start + best]


#: Up to this many anchored secrets, each anchor is looked for in a text with ``in``; past
#: it, those with anchors of _GRAM characters or more through an index of their first ones.
_FEW_SECRETS = 8
_GRAM = 4
#: Every run of _GRAM literal characters of a text, overlapping: where an anchor can start.
_LITERAL_GRAM = re.compile(f"(?=([0-9A-Za-z._~\\-]{{{_GRAM}}}))")
#: Up to this many base64 cores (the cores of about four secrets), short texts are checked
#: against their alternation; past it, through their prefixes (``_Compiled.by_prefix``).
_FEW_CORES = 24
#: Every run of MIN_BASE64_CORE base64 characters of a text, overlapping: where a core can
#: start.
_BASE64_GRAM = re.compile(f"(?=([A-Za-z0-9+/_\\-]{{{MIN_BASE64_CORE}}}))")


@dataclass(frozen=True)
class _Compiled:
    """An immutable snapshot of what the redactor searches for; shared by all threads."""

    anchored: tuple[tuple[str, re.Pattern[str]], ...]  # (anchor, pattern) of each secret of
    # MIN_SUBSTRING_LENGTH or more that has an anchor (see _anchor), but those in by_gram
    by_gram: dict[str, tuple[re.Pattern[str], ...]] | None  # with many secrets: the patterns
    # of those whose anchor has _GRAM characters or more, by its first _GRAM characters
    patterns: tuple[re.Pattern[str], ...]  # those of the secrets without an anchor
    any_secret: re.Pattern[str] | None  # all of these in one alternation, for short texts
    base64_cores: tuple[str, ...]  # the base64 cores of those secrets
    any_core: re.Pattern[str] | None  # all cores in one alternation, for short texts
    by_prefix: dict[str, tuple[str, ...]] | None  # with many cores: the cores by their
    # first MIN_BASE64_CORE characters (see core_candidates)
    whole: frozenset[str]  # every secret, for whole-value matching
    numbers_safe: bool = False  # no secret (nor base64 core) is made only of the characters
    # of a number's or a timestamp's text: those values need no scan (see _NUMBER_CHARS)
    memo: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    key_memo: dict[tuple[Any, ...], tuple[tuple[Any, bool], ...]] = field(
        default_factory=dict, compare=False, repr=False)  # a mapping's keys (_key), by tuple
    # short strings already redacted under these secrets (None: unchanged); cleared past
    # _MEMO_ENTRIES. A new set of secrets is a new _Compiled, with an empty memo.

    def secret_candidates(self, text: str) -> list[re.Pattern[str]]:
        """The patterns of the anchored secrets whose anchor is in ``text``: one ``in`` per
        secret when they are few, else one pass over the text (its runs of literal
        characters) whatever their number."""
        found = [pattern for anchor, pattern in self.anchored if anchor in text]
        if self.by_gram is not None:
            for gram in self.by_gram.keys() & set(_LITERAL_GRAM.findall(text)):
                found.extend(self.by_gram[gram])
        return found

    def core_candidates(self, text: str, short: bool) -> Sequence[str]:
        """The base64 cores that may occur in ``text``.

        A few cores: all of them for a long text, and for a short one only when their
        alternation matches. Many cores (an alternation of hundreds of literals costs
        about a millisecond per short text, tried at every position): the cores whose
        first characters start one of the text's base64 runs, found in one pass over the
        text whatever the number of cores."""
        if self.by_prefix is None:
            if short and (self.any_core is None or not self.any_core.search(text)):
                return ()
            return self.base64_cores
        hits = self.by_prefix.keys() & set(_BASE64_GRAM.findall(text))
        return [core for prefix in hits for core in self.by_prefix[prefix]]


class Redactor:
    """Masks secrets in text and in structured values. Thread-safe.

    ``Redactor(secrets)`` knows the given secret values; :meth:`add` registers more (for
    example when a ``${secret.NAME}`` is resolved). Patterns are compiled lazily, once per
    change of the set. A secret stays registered for the life of the redactor.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._pattern_cache: dict[str, re.Pattern[str]] = {}
        self._compiled: _Compiled | None = None
        self.update(secrets)

    # --- registration ---------------------------------------------------------------------

    def add(self, value: str) -> None:
        """Register one secret value (its stripped form too, when it has surrounding blanks)."""
        self.update((value,))

    def update(self, values: Iterable[str]) -> None:
        """Register several secret values at once (one recompilation)."""
        new: set[str] = set()
        for value in values:
            if not isinstance(value, str):
                raise TypeError(f"a secret value must be a str, not {type(value).__name__}")
            for form in (value, value.strip()):
                if form:
                    new.add(form)
        with self._lock:
            if not new <= self._secrets:
                self._secrets |= new
                self._compiled = None

    def __len__(self) -> int:
        """How many distinct secret values are registered."""
        with self._lock:
            return len(self._secrets)

    def _state(self) -> _Compiled:
        with self._lock:
            if self._compiled is None:
                self._compiled = self._compile()
            return self._compiled

    def _compile(self) -> _Compiled:
        # Longest first: where one secret contains another, the longer one is masked whole.
        long = sorted(
            (s for s in self._secrets if len(s) >= MIN_SUBSTRING_LENGTH), key=lambda s: (-len(s), s)
        )
        anchored = []
        unanchored: list[tuple[str, re.Pattern[str]]] = []
        cores: set[str] = set()
        for secret in long:
            pattern = self._pattern_cache.get(secret)
            if pattern is None:
                pattern = self._pattern_cache[secret] = _token_pattern(secret)
            anchor = _anchor(secret)
            if anchor:
                anchored.append((anchor, pattern))
            else:
                unanchored.append((secret, pattern))
            cores |= base64_cores(secret)
        # Any form of a secret is at least as long as the secret: the longer ones cannot be
        # in a short text.
        fitting_patterns = [p for s, p in unanchored if len(s) <= _SHORT_TEXT]
        any_secret = (re.compile("|".join(p.pattern for p in fitting_patterns))
                      if fitting_patterns else None)
        ordered_cores = tuple(sorted(cores, key=lambda c: (-len(c), c)))
        by_gram = None
        if len(anchored) > _FEW_SECRETS:
            indexed: dict[str, list[re.Pattern[str]]] = {}
            for anchor, pattern in anchored:
                if len(anchor) >= _GRAM:
                    indexed.setdefault(anchor[:_GRAM], []).append(pattern)
            by_gram = {gram: tuple(group) for gram, group in indexed.items()}
            anchored = [(a, p) for a, p in anchored if len(a) < _GRAM]
        any_core = by_prefix = None
        if len(ordered_cores) > _FEW_CORES:
            grouped: dict[str, list[str]] = {}
            for core in ordered_cores:
                grouped.setdefault(core[:MIN_BASE64_CORE], []).append(core)
            by_prefix = {prefix: tuple(group) for prefix, group in grouped.items()}
        else:
            # A core longer than a short text cannot be in it (and would cost a second
            # across the alternation's compilation for a 64 KiB secret).
            fitting = [core for core in ordered_cores if len(core) <= _SHORT_TEXT]
            if fitting:
                any_core = re.compile("|".join(map(re.escape, fitting)))
        return _Compiled(
            tuple(anchored), by_gram, tuple(p for _, p in unanchored), any_secret,
            ordered_cores,
            any_core, by_prefix,
            frozenset(self._secrets),
            not any(set(text) <= _NUMBER_CHARS for text in (*self._secrets, *ordered_cores)),
        )

    # --- redaction ------------------------------------------------------------------------

    def redact_text(self, text: str) -> str:
        """``text`` with secrets, secret-looking values and URL user-info replaced by ``***``."""
        state = self._state()
        if text.strip() in state.whole:
            return REDACTED
        return _redact_spans(text, state)

    def redact_value(self, value: Any) -> Any:
        """A redacted copy of ``value``, recursing into mappings, lists, tuples and sets.

        Strings are redacted as by :meth:`redact_text`; bytes likewise (as UTF-8, undecodable
        bytes kept); numbers are masked when their text contains a secret; under a
        secret-looking key (and in ``(name, value)`` header tuples) the whole value becomes
        ``***`` unless it is ``None`` or a bool. Other objects are kept unless their ``str()``
        contains a secret, in which case the redacted text replaces them. The input is never
        modified.
        """
        state = self._state()
        if len(state.memo) > _MEMO_ENTRIES:
            state.memo.clear()
        return self._redact(value, state, set(), state.memo)

    def _redact(self, value: Any, state: _Compiled, path: set[int],
                memo: dict[str, str | None]) -> Any:
        """``memo``: the short strings already redacted under this set of secrets (None:
        unchanged), shared by every call (:attr:`_Compiled.memo`). A value's keys and many of
        its strings repeat (every run of a list has the same keys, a job name and a state;
        the pages of the history are read again and again): each is scanned once."""
        if isinstance(value, str):
            done = memo.get(value, _UNSEEN)
            if done is _UNSEEN:
                if value.strip() in state.whole:
                    done = REDACTED
                else:
                    redacted = _redact_spans(value, state)
                    done = None if redacted == value else redacted
                if len(value) <= _MEMO_TEXT:
                    memo[value] = done
            return value if done is None else done
        if type(value) is dict:
            return self._contained(value, state, path, memo)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int | float | date | time) and state.numbers_safe:
            return value  # its text cannot hold any secret, raw or escaped
        if isinstance(value, int | float):
            try:
                text = str(value)
            except ValueError:  # an int past sys.get_int_max_str_digits(): not shown
                return REDACTED
            return value if _redact_spans(text, state) == text else REDACTED
        if isinstance(value, bytes | bytearray):
            decoded = bytes(value).decode("utf-8", "surrogateescape")
            redacted = self._redact(decoded, state, path, memo)
            if redacted is decoded:
                return type(value)(value)
            return type(value)(str(redacted).encode("utf-8", "surrogateescape"))
        if isinstance(value, Mapping | list | tuple | set | frozenset):
            return self._contained(value, state, path, memo)
        try:
            text = str(value)
        except Exception:  # an object that cannot even print itself is not shown
            return REDACTED
        redacted = self._redact(text, state, path, memo)
        return value if redacted is text else redacted

    def _contained(self, value: Any, state: _Compiled, path: set[int],
                   memo: dict[str, str | None]) -> Any:
        """A container redacted (``***`` for one that holds itself)."""
        if id(value) in path:
            return REDACTED
        path.add(id(value))
        try:
            return self._redact_container(value, state, path, memo)
        finally:
            path.discard(id(value))

    def _redact_container(self, value: Any, state: _Compiled, path: set[int],
                          memo: dict[str, str | None]) -> Any:
        if isinstance(value, Mapping):
            # The common cases inline (a string seen before in this call, a value that
            # needs no scan): an answer of 50 runs is ~1,000 keys and values.
            plain = _PLAIN_TYPES if state.numbers_safe else _NONE_BOOL
            out: dict[Any, Any] = {}
            # The keys of a list's dicts repeat: their redacted form and whether they are
            # secret-looking are remembered by the tuple of keys.
            keys = tuple(value)
            known = state.key_memo.get(keys)
            if known is None:
                known = tuple(self._key(key, state, path, memo) for key in keys)
                if len(state.key_memo) < _MEMO_ENTRIES and all(type(k) is str for k in keys):
                    state.key_memo[keys] = known
            for (new_key, secret_key), item in zip(known, value.values(), strict=True):
                kind = type(item)
                if secret_key:
                    out[new_key] = _mask_whole(item)
                elif kind in plain:
                    out[new_key] = item
                elif kind is str:
                    done = memo.get(item, _UNSEEN)
                    out[new_key] = (item if done is None else done if done is not _UNSEEN
                                    else self._redact(item, state, path, memo))
                else:
                    out[new_key] = self._redact(item, state, path, memo)
            return out
        if isinstance(value, tuple):
            if len(value) == 2 and isinstance(value[0], str) and is_secret_key(value[0]):
                items = [self._redact(value[0], state, path, memo), _mask_whole(value[1])]
            else:
                items = [self._redact(item, state, path, memo) for item in value]
            if hasattr(value, "_fields"):  # a named tuple keeps its type
                return type(value)(*items)
            return tuple(items)
        if isinstance(value, list):
            return [self._redact(item, state, path, memo) for item in value]
        return type(value)(self._redact(item, state, path, memo) for item in value)

    def _key(self, key: Any, state: _Compiled, path: set[int],
             memo: dict[str, str | None]) -> tuple[Any, bool]:
        """A mapping key redacted, and whether its value is a secret's (by its name)."""
        secret_key = isinstance(key, str) and _is_secret_key_cached(key)
        new_key = (self._redact(key, state, path, memo) if isinstance(key, str | bytes)
                   else key)
        return new_key, secret_key


_UNSEEN: Any = object()
#: Every character of the text of an int, a float (``1e-05``, ``inf``, ``nan``), a date, a
#: time or a datetime (``2026-12-01 23:27:04.616167+00:00``, ISO ``T`` and ``Z``). A secret
#: with another character cannot be in such a text, raw or escaped (an escape brings a
#: ``%``, ``\\`` or ``&``).
_NUMBER_CHARS = frozenset("0123456789.:+- TZeEinfa")
#: Strings up to this length are remembered across calls (:attr:`_Compiled.memo`), up to
#: _MEMO_ENTRIES of them (a few megabytes).
_MEMO_TEXT = 200
_MEMO_ENTRIES = 20_000
_NONE_BOOL = frozenset({type(None), bool})
_PLAIN_TYPES = frozenset({type(None), bool, int, float, datetime, date, time})


@functools.lru_cache(maxsize=4096)
def _is_secret_key_cached(name: str) -> bool:
    """:func:`is_secret_key`, remembered: the keys of structured values are few and repeat."""
    return is_secret_key(name)


def _mask_whole(value: Any) -> Any:
    """The value of a secret-looking key: ``***`` unless it only says whether a secret is set."""
    if value is None or isinstance(value, bool):
        return value
    return REDACTED


# --- span collection -----------------------------------------------------------------------


class _Scan:
    """One text being scanned: the original and an ASCII-offset-compatible lower-cased copy."""

    __slots__ = ("lowered", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        lowered = text.lower()
        # str.lower() can lengthen a few characters (U+0130); offsets must map one to one.
        self.lowered = lowered if len(lowered) == len(text) else _ascii_lower(text)


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _redact_spans(text: str, state: _Compiled) -> str:
    """Collect every span to mask, merge them, and replace each merged span by ``***``."""
    if not text:
        return text
    scan = _Scan(text)
    short = len(text) <= _SHORT_TEXT
    spans: list[tuple[int, int]] = []
    for pattern in state.secret_candidates(text):
        spans.extend(_overlapping(pattern, text))
    if state.patterns and (not short or (state.any_secret is not None
                                         and state.any_secret.search(text))):
        for pattern in state.patterns:
            spans.extend(_overlapping(pattern, text))
    cores = state.core_candidates(text, short)
    if cores:
        # str.find per core beats the alternation by an order of magnitude on long texts.
        spans.extend(_base64_spans(cores, text))
    if not short or _RULE_TRIGGER.search(scan.lowered):
        spans.extend(_key_value_spans(scan))
        spans.extend(_credential_spans(scan))
        spans.extend(_userinfo_spans(text))
    if not spans:
        return text
    return _apply(text, spans)


def _apply(text: str, spans: list[tuple[int, int]]) -> str:
    out: list[str] = []
    pos = 0
    for start, end in _merge(spans):
        if text[start:end] == REDACTED:
            out.append(text[pos:end])
        else:
            out.append(text[pos:start])
            out.append(REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _merge(spans: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Sorted, non-overlapping spans; touching spans become one."""
    spans = sorted(s for s in spans if s[1] > s[0])
    if not spans:
        return
    cur_start, cur_end = spans[0]
    for start, end in spans[1:]:
        if start <= cur_end:
            cur_end = max(cur_end, end)
        else:
            yield cur_start, cur_end
            cur_start, cur_end = start, end
    yield cur_start, cur_end


def _overlapping(pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, int]]:
    """Every match, including those that overlap an earlier one (``abab`` in ``ababab``)."""
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        yield m.span()
        pos = m.start() + 1


def _base64_spans(cores: Sequence[str], text: str) -> Iterator[tuple[int, int]]:
    """A base64 core of a secret masks the whole blob around it (its edges carry secret bits)."""
    for core in cores:
        pos = text.find(core)
        while pos >= 0:
            start, end = pos, pos + len(core)
            while start > 0 and text[start - 1] in BASE64_CHARS and text[start - 1] != "=":
                start -= 1  # "=" only pads the end of a blob; before it is a "key=" form
            while end < len(text) and text[end] in BASE64_CHARS:
                end += 1
            yield start, end
            pos = text.find(core, end)


def _key_value_spans(scan: _Scan) -> Iterator[tuple[int, int]]:
    """Values written after a secret-looking key: ``k=v``, ``"k": "v"``, ``k: v``, ``k 'v'``."""
    text = scan.text
    for key_start, key_end in _key_words(scan.lowered):
        tail = _KEY_TAIL.match(text, key_end)
        if tail is None:
            continue
        span = _value_span(
            text,
            tail.end(),
            key_start=key_start,
            quoted_key=bool(tail.group("close")),
            sep=tail.group("sep"),
        )
        if span is not None:
            yield span


def _key_words(lowered: str) -> Iterator[tuple[int, int]]:
    """Where the secret-looking words occur (``str.find`` per word: faster than one regex)."""
    for word in SECRET_KEY_WORDS:
        pos = lowered.find(word)
        while pos >= 0:
            yield pos, pos + len(word)
            pos = lowered.find(word, pos + 1)
    pos = lowered.find("identified")
    while pos >= 0:
        m = _SQL_IDENTIFIED_BY.match(lowered, pos)
        if m is not None:
            yield m.span()
        pos = lowered.find("identified", pos + 1)


def _value_span(
    text: str, i: int, *, key_start: int, quoted_key: bool, sep: str | None
) -> tuple[int, int] | None:
    """Where the value that starts at ``i`` lies (without its quotes), or None if it is harmless."""
    n = len(text)
    if i >= n:
        return None
    c = text[i]
    if c == "\\" and i + 1 < n and text[i + 1] in "\"'":  # a JSON string inside a JSON string
        start = i + 2
        end = _closing_quote(text, start, text[i + 1], escaped=True)
    elif c in "\"'":
        start = i + 1
        end = _closing_quote(text, start, c, escaped=False)
    elif c in "{[":
        start = i
        end = _closing_bracket(text, i)
    else:
        start = i
        if sep == ":" and not quoted_key:
            # A header or YAML line: the value is the rest of the line, unless the key sits
            # inside a quoted string (a header in a JSON string or a shell argument): then
            # the value ends where that string does.
            end = _line_end(text, i)
            line_start = text.rfind("\n", 0, key_start) + 1
            for quote in ('"', "'", '\\"', "\\'"):
                count = text.count(quote, line_start, key_start)
                if len(quote) == 1:
                    count -= text.count("\\" + quote, line_start, key_start)
                if count % 2 == 1:
                    quote_at = text.find(quote, i, end)
                    end = end if quote_at < 0 else quote_at
        else:
            m = _UNQUOTED_END.search(text, i)
            end = m.start() if m else n
        while end > start and text[end - 1] == "\\":  # keep the escape of a following quote
            end -= 1
    if end < 0:
        end = _line_end(text, start)
    value = text[start:end]
    if not value.strip() or value.strip().lower() in _HARMLESS_WORDS:
        return None
    scheme = _AUTH_SCHEME.match(value.lower())
    if scheme is not None and scheme.end() < len(value):
        start += scheme.end()  # "Authorization: Bearer ***" keeps the scheme name
    return start, end


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    end = len(text) if end < 0 else end
    while end > i and text[end - 1] in " \t\r":
        end -= 1
    return end


def _closing_quote(text: str, start: int, quote: str, *, escaped: bool) -> int:
    """Index where the string opened before ``start`` ends, or -1.

    Plain strings end at a quote preceded by an even run of backslashes; escaped strings (a
    JSON string written inside another) end at ``\\"`` whose backslash run is 1 modulo 4, and
    the index returned is that of the backslash.
    """
    limit = min(len(text), start + _MAX_VALUE_SCAN)
    pos = start
    while True:
        j = text.find(quote, pos, limit)
        if j < 0:
            return -1
        k = j
        while k > start and text[k - 1] == "\\":
            k -= 1
        run = j - k
        if not escaped and run % 2 == 0:
            return j
        if escaped and run % 4 == 1:
            return j - 1
        pos = j + 1


def _closing_bracket(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at ``start`` (quotes respected), or -1."""
    depth = 0
    quote: str | None = None
    i = start
    limit = min(len(text), start + _MAX_VALUE_SCAN)
    while i < limit:
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _credential_spans(scan: _Scan) -> Iterator[tuple[int, int]]:
    """Credentials recognisable without a key: Bearer and Basic values, API tokens, PEM keys."""
    text, lowered = scan.text, scan.lowered
    for m in _BEARER.finditer(lowered):
        token = m.group("v")
        # A bare "bearer authentication" in prose is not a token: require a digit or symbol.
        if _word_start(lowered, m.start()) and any(not ch.isalpha() for ch in token):
            yield m.span("v")
    for m in _BASIC.finditer(lowered):
        start, end = m.span("v")
        if _word_start(lowered, m.start()) and _is_basic_credential(text[start:end]):
            yield start, end
    for m in _API_TOKEN.finditer(text):
        yield m.span()
    for m in _PRIVATE_KEY.finditer(text):
        yield m.span("v")


def _word_start(text: str, i: int) -> bool:
    """True when a word starts at ``i`` (checked here: a leading ``\\b`` would slow the search)."""
    return i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")


def _is_basic_credential(value: str) -> bool:
    """True when ``value`` is base64 of ``user:password`` (as in HTTP Basic authentication)."""
    padded = value.rstrip("=")
    padded += "=" * (-len(padded) % 4)
    try:
        decoded = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _userinfo_spans(text: str) -> Iterator[tuple[int, int]]:
    """The user-info of URLs, plain or percent-encoded (a URL inside a query string)."""
    for m in _USERINFO.finditer(text):
        yield m.span("ui")
    if "%" in text:
        for m in _USERINFO_ENCODED.finditer(text):
            yield m.span("ui")
