"""``cadenza run --local`` goes through retries and deferrals as a server would: the run
comes back QUEUED with ``not_before``; the command waits for it and tries again."""

from __future__ import annotations

from pathlib import Path

from executor_home import make_home
from typer.testing import CliRunner

from cadenza.cli.main import app

runner = CliRunner()

FLAKY = '''
from pathlib import Path
import cadenza

def flaky(marker, fails=1):
    path = Path(marker)
    done = int(path.read_text()) if path.exists() else 0
    path.write_text(str(done + 1))
    if done < fails:
        raise cadenza.Retryable(f"try {done + 1} fails")
    return {"tries": done + 1}
'''


def jobs(marker: Path, attempts: int) -> str:
    return f"""
[jobs.flaky]
retry = {{ attempts = {attempts}, backoff = "fixed", base_seconds = 0.2, jitter = 0 }}
[[jobs.flaky.steps]]
name = "call"
type = "python"
callable = "cz_flaky:flaky"
isolation = "thread"
op_kwargs = {{ marker = "{marker.as_posix()}", fails = 2 }}
"""


def test_run_local_waits_for_each_retry_and_succeeds(tmp_path: Path) -> None:
    marker = tmp_path / "tries.txt"
    home = make_home(tmp_path / "home", jobs(marker, attempts=3))
    (home / "plugins" / "cz_flaky.py").write_text(FLAKY)
    result = runner.invoke(app, ["--home", str(home), "run", "flaky", "--local"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert marker.read_text() == "3"
    assert result.stdout.count("tries again in") == 2
    assert "SUCCEEDED" in result.stdout.splitlines()[-1]


def test_run_local_stops_at_needs_review_with_exit_3(tmp_path: Path) -> None:
    marker = tmp_path / "tries.txt"
    home = make_home(tmp_path / "home", jobs(marker, attempts=2))
    (home / "plugins" / "cz_flaky.py").write_text(FLAKY)
    result = runner.invoke(app, ["--home", str(home), "run", "flaky", "--local"])
    assert result.exit_code == 3, result.stdout + result.stderr
    assert marker.read_text() == "2"
    listed = runner.invoke(app, ["--home", str(home), "runs", "list"])
    assert "NEEDS_REVIEW" in listed.stdout
