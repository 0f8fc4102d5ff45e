"""``load_settings``: cadenza.toml alone, with the problems of jobs.toml beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza.config import load_settings
from cadenza.domain.errors import ConfigError

SETTINGS = '[store]\nurl = "sqlite:///data/cadenza.db"\n'
JOB = '[jobs.ok]\n[[jobs.ok.steps]]\nname = "s"\ntype = "python"\ncallable = "m:f"\n'


def _home(tmp_path: Path, settings: str, jobs: str) -> Path:
    (tmp_path / "cadenza.toml").write_text(settings, encoding="utf-8")
    (tmp_path / "jobs.toml").write_text(jobs, encoding="utf-8")
    return tmp_path


def test_a_valid_home_has_no_jobs_problems(tmp_path: Path) -> None:
    loaded = load_settings(_home(tmp_path, SETTINGS, JOB))
    assert loaded.jobs_errors == 0 and loaded.settings.store.url.startswith("sqlite")


def test_a_broken_jobs_file_is_reported_not_raised(tmp_path: Path) -> None:
    loaded = load_settings(_home(tmp_path, SETTINGS, JOB + "[jobs.bad\n"))
    assert loaded.jobs_errors == 1
    assert all(p.file == "jobs.toml" for p in loaded.jobs_problems)
    errors = [str(p) for p in loaded.jobs_problems if p.is_error]
    assert len(errors) == 1 and errors[0].startswith("jobs.toml:6:"), errors


def test_a_broken_settings_file_raises_its_own_problems_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_home(tmp_path, SETTINGS + "[store\n", "[jobs.bad\n"))
    files = {getattr(p, "file", None) for p in caught.value.problems}
    assert files == {"cadenza.toml"}
