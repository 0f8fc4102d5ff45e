"""`cadenza validate` refuses a literal path naming a file Cadenza keeps private (a report's
template, a file step's path under a wide root, a sql_query file) and a template outside
templates/, naming the step and the rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.private_files import RULE

SETTINGS = ('[store]\nurl = "sqlite:///data/cadenza.db"\n[files]\nroots = ["data"]\n'
            '[connections.w]\ntype = "sql"\nurl = "sqlite:///data/w.db"\n')
HEAD = '[jobs.j]\n[[jobs.j.steps]]\nname = "leak"\n'
REPORT = 'type = "report"\npath = "r.html"\nsections = [{ title = "t", connection = "w", ' \
    'query = "select 1" }]\n'


def _validate(home: Path, step: str) -> str:
    (home / "cadenza.toml").write_text(SETTINGS)
    (home / "jobs.toml").write_text(HEAD + step)
    (home / "data").mkdir(exist_ok=True)
    (home / "data" / "secret.key").write_text("k\n")
    result = CliRunner().invoke(app, ["--home", str(home), "validate"])
    assert result.exit_code == 1, result.output
    assert "step 'leak'" in result.output
    return result.output


@pytest.mark.parametrize("template", ["data/secret.key", "./data//secret.key",
                                      "data/backups/x.db", "data/cadenza.db-wal"])
def test_a_report_template_naming_a_private_file(tmp_path: Path, template: str) -> None:
    output = _validate(tmp_path, REPORT + f'template = "{template}"\n')
    assert "jobs.j.steps[0].template" in output and RULE in output


def test_a_report_template_outside_templates(tmp_path: Path) -> None:
    output = _validate(tmp_path, REPORT + 'template = "data/files/t.html"\n')
    assert "is not in the home's templates/ folder" in output


@pytest.mark.parametrize("path", ["secret.key", "secrets.json", "backups/a.db"])
def test_a_file_load_path_naming_a_private_file(tmp_path: Path, path: str) -> None:
    output = _validate(tmp_path, 'type = "file_load"\nconnection = "w"\ntable = "x"\n'
                                 f'path = "{path}"\n')
    assert "jobs.j.steps[0].path" in output and RULE in output


def test_a_sql_file_naming_a_private_file(tmp_path: Path) -> None:
    output = _validate(tmp_path, 'type = "sql_query"\nconnection = "w"\n'
                                 'file = "data/secrets.json"\n')
    assert "jobs.j.steps[0].file" in output and RULE in output
