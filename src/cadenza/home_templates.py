"""Templates of a home: read only from its ``templates/`` folder (docs/security.md).

A report's ``template`` and a home's notification templates (``templates/notify/``) are
Jinja2 files of ``HOME/templates/``. :class:`HomeTemplateLoader` is the one loader both use:
each name (the template itself and whatever it ``{% include %}``s) is resolved, symbolic
links followed, and must still lie inside ``templates/`` and not be one of the home's
private files (:mod:`cadenza.private_files`), so a link in ``templates/`` pointing at
``data/secret.key`` is refused without the key being read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import jinja2
from jinja2.loaders import split_template_path

from cadenza.private_files import RULE, PrivateFiles

TEMPLATES_DIR = "templates"
MAX_TEMPLATE = 1 << 20


class TemplateRefused(jinja2.TemplateError):
    """A template name that names a file outside ``templates/`` or a private file (not a
    ``TemplateNotFound``: a loader chain must not fall back to another file silently)."""


def _inside(path: Path, folder: Path) -> bool:
    name, base = os.path.normcase(str(path)), os.path.normcase(str(folder))
    return name == base or name.startswith(base.rstrip(os.sep) + os.sep)


class HomeTemplateLoader(jinja2.BaseLoader):
    """Loads templates from ``folder`` (inside ``HOME/templates/``), refusing a name that
    resolves elsewhere or to a private file of the home."""

    def __init__(self, home: Path, folder: Path | None = None,
                 private: PrivateFiles | None = None) -> None:
        self.home = home.resolve()
        self.root = (self.home / TEMPLATES_DIR).resolve()
        self.folder = (folder or self.root).resolve()
        self.private = private or PrivateFiles(self.home)

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str, Callable[[], bool]]:
        parts = split_template_path(template)
        path = self.folder.joinpath(*parts)
        if not os.path.lexists(path):
            raise jinja2.TemplateNotFound(template)
        real = path.resolve()
        why = self.private.reason(real)
        if why is not None:
            raise TemplateRefused(f"template {template!r} {RULE} ({why})")
        if not _inside(real, self.root):
            raise TemplateRefused(f"template {template!r} resolves outside the home's "
                                  f"{TEMPLATES_DIR}/ folder")
        if not real.is_file():
            raise jinja2.TemplateNotFound(template)
        if real.stat().st_size > MAX_TEMPLATE:
            raise TemplateRefused(f"template {template!r} is larger than {MAX_TEMPLATE} bytes")
        source = real.read_text(encoding="utf-8")
        mtime = os.path.getmtime(real)
        return source, str(real), lambda: _unchanged(real, mtime)


def _unchanged(path: Path, mtime: float) -> bool:
    try:
        return os.path.getmtime(path) == mtime
    except OSError:
        return False


def template_problem(home: Path, template: str, private: PrivateFiles | None = None
                     ) -> str | None:
    """Why a report's ``template`` (relative to the home) may not be used, or None; a
    literal check, made by validation too (the file need not exist yet)."""
    text = template.replace("\\", "/")
    home = home.resolve()
    root = (home / TEMPLATES_DIR).resolve()
    given = Path(text)
    path = given if given.is_absolute() else home / given
    real = path.resolve()
    why = (private or PrivateFiles(home)).reason(real)
    if why is not None:
        return f"template {template!r} {RULE} ({why})"
    if not _inside(real, root) or real == root:
        return (f"template {template!r} is not in the home's {TEMPLATES_DIR}/ folder: "
                f"templates are read from there only (e.g. {TEMPLATES_DIR}/report.html)")
    return None
