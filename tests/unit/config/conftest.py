"""Fixtures for the config tests: homes made of real files in a temporary directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from config_helpers import DATA, DOWNSTREAM, MINIMAL_SETTINGS, MakeHome


@pytest.fixture
def make_home(tmp_path: Path) -> MakeHome:
    """Write a home with the given cadenza.toml and jobs.toml texts (None: no such file)."""

    def make(settings: str | None = MINIMAL_SETTINGS, jobs: str | None = "# no jobs\n",
             name: str = "home") -> Path:
        home = tmp_path / name
        home.mkdir()
        if settings is not None:
            (home / "cadenza.toml").write_text(settings, encoding="utf-8", newline="")
        if jobs is not None:
            (home / "jobs.toml").write_text(jobs, encoding="utf-8", newline="")
        return home

    return make


@pytest.fixture
def spec_home(tmp_path: Path) -> Path:
    """A home holding SPEC §3's cadenza.toml (plus the downstream connection) and §4's jobs."""
    home = tmp_path / "spec"
    home.mkdir()
    settings = (DATA / "spec_cadenza.toml").read_text(encoding="utf-8") + DOWNSTREAM
    (home / "cadenza.toml").write_text(settings, encoding="utf-8")
    shutil.copy(DATA / "spec_jobs.toml", home / "jobs.toml")
    return home
