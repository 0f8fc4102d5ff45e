"""POST /api/backup writes under data/backups/ of the home, privately; never where asked."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from tests.integration.web.api_env import ApiEnv, api_env, user_of


@pytest.fixture
def env(tmp_path: Path):  # type: ignore[no-untyped-def]
    with api_env(tmp_path) as made:
        yield made


@pytest.mark.reliability_case(56)
def test_backup_lands_in_data_backups_privately(env: ApiEnv) -> None:
    client = env.session(user_of("admin"))
    answer = client.post("/api/backup")
    assert answer.status_code == 201, answer.text
    file = answer.json()["file"]
    assert file.startswith("data/backups/cadenza-")
    written = env.services.home.path / file
    assert written.is_file()
    if os.name != "nt":
        assert stat.S_IMODE(written.stat().st_mode) == 0o600


@pytest.mark.parametrize("body", [
    {"path": "../../evil.db"}, {"name": "../x.db"}, {"file": "/tmp/x.db"}, {"path": "ok.db"},
])
def test_a_chosen_place_is_refused(env: ApiEnv, body: dict[str, str], tmp_path: Path) -> None:
    client = env.session(user_of("admin"))
    answer = client.post("/api/backup", json=body)
    assert answer.status_code == 422, answer.text
    assert not (tmp_path / "evil.db").exists()
