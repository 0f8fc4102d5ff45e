"""The CLI's output boundary: outside text is redacted, inert and never rich markup."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator

import pytest
from rich.table import Table

from cadenza.audit.redact import Redactor
from cadenza.audit.terminal import SanitizingStream
from cadenza.cli import output
from cadenza.cli.output import SafeConsole, guarded_streams, print_json, print_table, shown

SECRET = "Zq9!x/Pw+7&kLm2#"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b1A\u202e[red]markup[/red] :smile:"


@pytest.fixture
def redactor() -> Iterator[Redactor]:
    known = Redactor([SECRET])
    output.use_redactor(lambda: known)
    yield known
    output.use_redactor(None)


def test_shown_redacts_and_neutralises(redactor: Redactor) -> None:
    assert shown(f"error {SECRET} {HOSTILE}") == (
        "error *** \\x1b]0;pwned\\x07\\x1b[2J\\x9b1A\\u202e[red]markup[/red] :smile:")
    assert shown(None) == ""


def test_shown_without_a_home_applies_the_store_rules() -> None:
    output.use_redactor(None)
    assert shown("password=hunter22 \x1b[2J") == "password=*** \\x1b[2J"


def test_console_strings_are_inert_and_not_markup() -> None:
    buffer = io.StringIO()
    console = SafeConsole(file=buffer, highlight=False, markup=False, emoji=False, width=200)
    console.print(f"job {HOSTILE}")
    table = Table()
    table.add_column("description")
    table.add_row(HOSTILE)
    console.print(table)
    text = buffer.getvalue()
    assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text
    assert text.count("[red]markup[/red]") == 2 and text.count(":smile:") == 2


def test_piped_tables_are_redacted_and_inert(redactor: Redactor,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    print_table([{"id": "r1", "message": f"{SECRET} {HOSTILE}"}], ["id", "message"])
    text = capsys.readouterr().out
    assert SECRET not in text and "\x1b" not in text and "\u202e" not in text
    assert "r1\t*** \\x1b]0;pwned" in text


def test_json_has_no_raw_control_character(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"message": HOSTILE, "tab": "a\tb"})
    text = capsys.readouterr().out
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 and c != "\u202e"
               for c in text.replace("\n", ""))
    assert json.loads(text) == {"message": HOSTILE, "tab": "a\tb"}


def test_guarded_streams_keep_the_consoles_on_the_real_streams(
        redactor: Redactor, capsys: pytest.CaptureFixture[str]) -> None:
    with guarded_streams():
        print(f"a step printed {SECRET} \x1b[2J")
        output.out.print("ours", markup=False)
        assert isinstance(sys.stdout, SanitizingStream)
    output.out.print("after", markup=False)
    text = capsys.readouterr().out
    assert text == "a step printed *** \\x1b[2J\nours\nafter\n"
