"""The demo home (``cadenza init X --example``) ships a small unit pool and a job that rents
one of its members: ``resources list`` shows it, the job runs offline and says which unit
it used (docs/pools.md)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()


def _cli(home: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["--home", str(home), *args])
    return result.exit_code, result.output


def test_the_demo_home_has_a_pool_and_a_job_that_rents_a_unit(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    assert runner.invoke(app, ["init", str(home), "--example"]).exit_code == 0
    code, output = _cli(home, "validate")
    assert code == 0, output
    code, output = _cli(home, "resources", "list", "--json")
    assert code == 0, output
    assert [(r["resource_id"], r["pool"], r["kind"], r["state"])
            for r in json.loads(output)] == [("unit-1", "units", "unit", "AVAILABLE"),
                                             ("unit-2", "units", "unit", "AVAILABLE")]
    code, output = _cli(home, "run", "profile-check", "--local")
    assert code == 0, output
    code, output = _cli(home, "resources", "list", "--json")
    states = {r["resource_id"]: r["state"] for r in json.loads(output)}
    assert sorted(states.values()) == ["AVAILABLE", "COOLDOWN"]
    used = next(rid for rid, state in states.items() if state == "COOLDOWN")
    code, output = _cli(home, "runs", "list", "--json")
    assert code == 0, output
    (run,) = [r for r in json.loads(output) if r["job"] == "profile-check"]
    assert run["state"] == "SUCCEEDED"
    code, output = _cli(home, "runs", "logs", run["id"])
    assert code == 0, output
    assert f"using unit {used} (profile demo-{used[-1]})" in output
