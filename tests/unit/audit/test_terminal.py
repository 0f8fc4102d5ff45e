"""Text fit for a terminal: control characters made visible, streams that redact."""

from __future__ import annotations

import base64
import io
import logging
import sys
from urllib.parse import quote

import pytest

from cadenza.audit.redact import Redactor
from cadenza.audit.terminal import (
    MAX_PENDING,
    LineSanitizer,
    SanitizingStream,
    has_controls,
    printable,
    sanitized_std_streams,
)

SECRET = "Zq9!x/Pw+7&kLm2#"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # OSC: retitle the window
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # CSI: clear the screen
        ("ok\rFAILED", "ok\\rFAILED"),  # overwrite the line
        ("\x9b1A", "\\x9b1A"),  # C1 CSI
        ("\x08\x7f\x00", "\\x08\\x7f\\x00"),
        ("abc\u202edef\u2066", "abc\\u202edef\\u2066"),  # bidirectional overrides
    ],
)
def test_control_characters_become_visible_escapes(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert has_controls(raw)


def test_newline_tab_and_text_stay() -> None:
    text = "line one\n\tline two: é 漢字 😀 \u200f [red]x[/red]\n"
    assert printable(text) == text
    assert not has_controls(text)
    assert printable("a\r\nb\r\n") == "a\nb\n"  # Windows line ends


def test_every_c0_and_c1_character_but_newline_and_tab_is_neutralised() -> None:
    for code in [*range(0x20), *range(0x7F, 0xA0)]:
        out = printable(chr(code))
        if chr(code) in "\n\t":
            assert out == chr(code)
        else:
            assert all(0x20 <= ord(c) < 0x7F for c in out), (code, out)


def test_line_sanitizer_redacts_a_secret_cut_between_two_writes() -> None:
    sanitizer = LineSanitizer(Redactor([SECRET]))
    assert sanitizer.feed(f"token {SECRET[:4]}") == ""
    assert sanitizer.feed(f"{SECRET[4:]} \x1b[2J\nnext") == "token *** \\x1b[2J\n"
    assert sanitizer.flush() == "next"
    assert sanitizer.flush() == ""


def test_line_sanitizer_masks_encoded_forms() -> None:
    sanitizer = LineSanitizer(Redactor([SECRET]))
    encoded = base64.b64encode(SECRET.encode()).decode()
    out = sanitizer.feed(f"{encoded} {quote(SECRET, safe='')}\n")
    assert out == "*** ***\n"


def test_a_line_without_end_is_written_past_the_limit() -> None:
    sanitizer = LineSanitizer(None)
    assert sanitizer.feed("x" * MAX_PENDING) == ""
    assert sanitizer.feed("y") == "x" * MAX_PENDING + "y"


def test_sanitizing_stream_writes_lines_and_the_rest_on_flush() -> None:
    target = io.StringIO()
    stream = SanitizingStream(target, Redactor([SECRET]))
    print(f"a {SECRET}\x1b]0;t\x07", file=stream)
    assert target.getvalue() == "a ***\\x1b]0;t\\x07\n"
    stream.write("partial")
    assert target.getvalue().endswith("\n")
    stream.flush()
    assert target.getvalue().endswith("partial")
    with pytest.raises(TypeError):
        stream.write(b"bytes")  # type: ignore[arg-type]


def test_sanitized_std_streams_replace_and_restore(capsys: pytest.CaptureFixture[str]) -> None:
    before = sys.stdout, sys.stderr
    with sanitized_std_streams(Redactor([SECRET])) as (real_out, real_err):
        assert (real_out, real_err) == before
        print(f"out {SECRET} \x1b[31m")
        print(f"err {SECRET}", file=sys.stderr, end="")
        real_out.write("ours \x1b[1m\n")  # our own output goes to the real stream as is
    assert (sys.stdout, sys.stderr) == before
    captured = capsys.readouterr()
    assert captured.out == "out *** \\x1b[31m\nours \x1b[1m\n"
    assert captured.err == "err ***"  # flushed on exit


@pytest.mark.reliability_case(37)
def test_serve_log_lines_are_redacted_whole_and_inert() -> None:
    from cadenza.server import RedactingFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter(Redactor([SECRET]), "%(levelname)s %(message)s"))
    logger = logging.getLogger("cadenza.test-terminal")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("remote said %s", f"{SECRET}\x1b]0;x\x07")
        try:
            raise ValueError(f"boom {base64.b64encode(SECRET.encode()).decode()}\x1b[2J")
        except ValueError:
            logger.exception("step failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert SECRET not in text and base64.b64encode(SECRET.encode()).decode() not in text
    assert "\x1b" not in text
    assert "remote said ***\\x1b]0;x\\x07" in text
    assert "ValueError: boom ***\\x1b[2J" in text  # the traceback too
