"""What users read cites only what users have: the repository.

Docstrings, comments, CLI help, page templates, messages, the example home, ``docs/``,
``README.md`` and ``bench/`` must not send the reader to documents that are not in the
repository (the design notes the project started from, its issue tracker's numbers). Cite a
``docs/*.md`` page instead, or say the thing in plain words. ``CHANGELOG.md`` is history and
is not checked; third-party files under ``static/vendor`` are not ours.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CITATION = re.compile(
    r"SPEC §|SPEC section|SPEC\.md|DESIGN\.md|RELIABILITY\.md|RELIABILITY #\d"
    r"|\.\./shared|shared/peer-bench|\bUI\.md\b"
    r"|\b[Ii]ssue \d+\b"
    r"|\b[Tt]he brief\b"
)
"""The citation forms, matched precisely (a random ``seed`` or a "spec" object is fine)."""

SKIP_DIRS = {"__pycache__", "vendor", "images", ".peers-venv"}  # the peers' venv: `make bench`
SKIP_FILES = {"CHANGELOG.md"}
SKIP_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".ico", ".mo", ".pyc", ".woff", ".woff2"}


def _files() -> Iterator[Path]:
    yield ROOT / "README.md"
    for top in ("src", "docs", "bench"):
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if not path.is_file() or SKIP_DIRS.intersection(rel.parts[:-1]):
                continue
            if path.name in SKIP_FILES or path.suffix.lower() in SKIP_SUFFIXES:
                continue
            yield path


def _hits() -> list[str]:
    out = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            match = CITATION.search(line)
            if match:
                rel = path.relative_to(ROOT).as_posix()
                out.append(f"{rel}:{number}: {match.group(0)!r} in {line.strip()[:120]}")
    return out


def test_user_facing_text_cites_no_document_outside_the_repository() -> None:
    hits = _hits()
    assert not hits, (
        "cite a docs/*.md page or say it in plain words instead:\n" + "\n".join(hits))


def test_the_pattern_finds_citations_and_spares_ordinary_words() -> None:
    for cited in ("leases (SPEC §8)", "see SPEC.md", "RELIABILITY #45", "issue 16 item 8",
                  "../shared/peer-bench", "the brief's example", 'UI.md "Resources"'):
        assert CITATION.search(cited), cited
    for fine in ("random.Random(seed)", "def seed(url)", "spec.enabled", "docs/ui.md",
                 "a ChildSpec", "issues a warning", "tissue 3"):
        assert not CITATION.search(fine), fine
