"""Nothing left behind: every word a template shows goes through the catalogue.

The scanner reads each template of the pages and of the notifications, drops what Jinja
computes (``{{ }}``, ``{% %}``, comments), code (``<code>``, ``<pre>``, scripts, styles) and
tags, and fails on a plain word left in the text or in an attribute a reader sees (title,
placeholder, aria-label, alt). Code-like tokens (``Europe/Paris``, ``user:ana``, TOML lines)
and a few symbols that read the same in every language are allowed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3] / "src" / "cadenza"
TEMPLATES = sorted([*(ROOT / "web" / "templates" / "ui").glob("*.html"),
                    *(ROOT / "notify" / "templates").glob("*")])
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
CODE = re.compile(r"<(script|style|code|pre)\b.*?</\1>|<!--.*?-->", re.S | re.I)
TAG = re.compile(r"<[^>]*>", re.S)
SEEN_ATTRIBUTES = re.compile(r'\b(title|placeholder|aria-label|alt)="([^"]*)"')
WORD = re.compile(r"[A-Za-z][a-z]+[,.;:!?)]*|[A-Z][a-z]*")
SAME_IN_EVERY_LANGUAGE = {"Cadenza", "ms", "s", "min", "h", "p95", "true", "false", "refs-"}
"""Symbols (units, the product's name, TOML's true/false) that no language translates."""


def _blank(match: re.Match[str]) -> str:
    return "\n" * match.group(0).count("\n")  # keep the line numbers


def left_behind(text: str) -> list[tuple[int, str]]:
    """(line, word) for each plain word of ``text`` outside a translation call."""
    found: list[tuple[int, str]] = []
    for match in SEEN_ATTRIBUTES.finditer(text):
        for token in JINJA.sub("", match.group(2)).split():
            if WORD.fullmatch(token) and token not in SAME_IN_EVERY_LANGUAGE:
                found.append((text.count("\n", 0, match.start()) + 1, token))
    body = TAG.sub(_blank, CODE.sub(_blank, JINJA.sub(_blank, text)))
    body = re.sub(r"&[a-z]+;|&#\d+;", " ", body)
    for number, line in enumerate(body.split("\n"), 1):
        for token in line.split():
            if WORD.fullmatch(token) and token not in SAME_IN_EVERY_LANGUAGE:
                found.append((number, token))
    return found


def test_the_scanner_finds_a_word_outside_a_translation_call() -> None:
    assert left_behind('<p>{{ _("Saved") }} <b>Done</b></p>') == [(1, "Done")]
    assert left_behind('<input placeholder="Search jobs">') == [(1, "Search"), (1, "jobs")]
    assert left_behind('<p title="{{ _(\'x\') }}">{{ n }} ms <code>a = "b c"</code></p>') == []
    assert left_behind('<input placeholder="Europe/Paris"> user:ana &mdash;') == []


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_no_visible_text_outside_the_catalogue(template: Path) -> None:
    found = left_behind(template.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{template.name}:{line}: {word!r} is not translated; "
                                f"wrap it in {{{{ _(...) }}}}" for line, word in found)
