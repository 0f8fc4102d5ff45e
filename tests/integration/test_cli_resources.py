"""``cadenza resources list | show | enable | disable`` on a home with pools (SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.pools_home import PROXY_PW, python_job, write_home
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()


def _cli(home: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.output


def test_list_show_disable_enable(tmp_path: Path) -> None:
    home = write_home(tmp_path / "home", python_job("scrape", "show", "units = 1")).path
    code, output = _cli(home, "resources", "list", "--json")
    assert code == 0, output
    rows = json.loads(output)
    assert [(r["resource_id"], r["pool"], r["kind"], r["state"]) for r in rows] == [
        ("fr-1", "egress", "route", "AVAILABLE"), ("fr-2", "egress", "route", "AVAILABLE"),
        ("acct-1", "logins", "credential", "AVAILABLE"), ("u-1", "units", "unit", "AVAILABLE"),
        ("u-2", "units", "unit", "AVAILABLE")]
    code, output = _cli(home, "resources", "list", "--pool", "units")
    assert code == 0
    lines = output.splitlines()
    assert lines[0].split("\t")[:4] == ["resource_id", "pool", "kind", "state"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["u-1", "u-2"]
    code, output = _cli(home, "resources", "list", "--pool", "nope")
    assert code == 2 and "no pool 'nope' (pools: egress, logins, units)" in output

    code, output = _cli(home, "resources", "disable", "fr-1", "--reason", "flaky")
    assert code == 0 and output.strip() == "resource fr-1 DISABLED"
    code, output = _cli(home, "resources", "disable", "fr-1")
    assert code == 2 and "DISABLED already" in output
    code, output = _cli(home, "resources", "show", "fr-1", "--json")
    assert code == 0
    shown = json.loads(output)
    assert shown["state"] == "DISABLED"
    latest = shown["history"][0]
    assert latest["event_type"] == "RESOURCE_STATE_CHANGED"
    assert latest["actor"].startswith("cli:")
    assert "flaky by cli:" in latest["message"]
    assert PROXY_PW not in output
    code, output = _cli(home, "resources", "enable", "fr-1")
    assert code == 0 and output.strip() == "resource fr-1 AVAILABLE"
    code, output = _cli(home, "resources", "enable", "fr-1")
    assert code == 2 and "only a DISABLED or FAULT member can be enabled" in output
    code, output = _cli(home, "resources", "show", "nope")
    assert code == 2 and "no resource 'nope'" in output
    code, output = _cli(home, "resources", "show", "u-1")
    assert code == 0 and "route: fr-1" in output and "registered AVAILABLE" in output
