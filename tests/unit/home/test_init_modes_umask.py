"""`cadenza init` makes a private home whatever the umask (POSIX)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX modes; Windows keeps ACLs")


@pytest.mark.parametrize("example", [False, True])
def test_init_under_umask_zero_is_private(tmp_path: Path, example: bool) -> None:
    home = tmp_path / "home"
    args = ["init", str(home)] + (["--example"] if example else [])
    old = os.umask(0)
    try:
        result = CliRunner().invoke(app, args)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    assert mode(home) & 0o027 == 0
    for name in ("cadenza.toml", "jobs.toml"):
        assert mode(home / name) & 0o037 == 0, name
    for folder in ("plugins", "templates"):
        where = home / folder
        if where.exists():
            for item in [where, *where.rglob("*")]:
                assert mode(item) & 0o022 == 0, item


def test_validate_warns_on_a_world_writable_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert CliRunner().invoke(app, ["init", str(home)]).exit_code == 0
    os.chmod(home, 0o777)
    result = CliRunner().invoke(app, ["--home", str(home), "validate"])
    assert f"chmod o-w {home}" in result.output, result.output
