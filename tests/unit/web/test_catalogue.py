"""Every page string goes through the catalogue (SPEC §16): the committed messages.pot
holds every string the templates and page modules mark, and a French browser gets the
French strings that exist (English for the rest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from babel.messages.pofile import read_po

from cadenza.web.ui.render import LOCALE_DIR, translations

ROOT = Path(__file__).resolve().parents[3]


def _ids(path: Path) -> set[str]:
    with path.open("rb") as source:
        return {m.id for m in read_po(source) if m.id and isinstance(m.id, str)}


def test_the_catalogue_template_is_up_to_date(tmp_path: Path) -> None:
    fresh = tmp_path / "messages.pot"
    subprocess.run([sys.executable, "-m", "babel.messages.frontend", "extract",
                    "-F", str(ROOT / "babel.cfg"), "--no-location", "--omit-header",
                    "--sort-output", "-o", str(fresh), str(ROOT)],
                   check=True, cwd=ROOT, capture_output=True)
    missing = _ids(fresh) - _ids(LOCALE_DIR / "messages.pot")
    assert not missing, ("strings not in src/cadenza/web/locale/messages.pot; run "
                         f"`pybabel extract -F babel.cfg --no-location --omit-header "
                         f"--sort-output -o src/cadenza/web/locale/messages.pot .`: {missing}")


def test_french_is_used_where_translated() -> None:
    fr = translations("fr")
    assert fr.gettext("Jobs") == "Tâches"
    assert fr.gettext("A string nobody translated") == "A string nobody translated"
