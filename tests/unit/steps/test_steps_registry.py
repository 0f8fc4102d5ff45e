"""Step types come from entry points, built-ins exactly like third-party ones."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType, registry, registry_errors, reload_registry

BUILT_INS = ["call_job", "file_export", "file_load", "http", "ldap_sync", "notify", "python",
             "report", "sql_copy", "sql_query"]


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path where a test installs a distribution (dist-info + module)."""
    sys.path.insert(0, str(tmp_path))
    reload_registry()
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("cz_test_plugin")]:
        del sys.modules[name]
    reload_registry()


def _install(where: Path, entry_points: str, module: str) -> None:
    info = where / "cz_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cz-test-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[cadenza.steps]\n" + entry_points)
    (where / "cz_test_plugin.py").write_text(module)


def test_the_ten_built_ins_are_registered_through_entry_points() -> None:
    types = registry()
    assert sorted(types) == BUILT_INS
    for name, step_type in types.items():
        assert issubclass(step_type, StepType)
        assert step_type.name == name
        assert issubclass(step_type.Config, StepConfig)
    assert registry_errors() == []


PLUGIN = '''
from cadenza.config.types import NonEmptyStr
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType


class SftpConfig(StepConfig):
    host: NonEmptyStr


class SftpStep(StepType):
    name = "sftp_get"
    Config = SftpConfig


class NotAStep:
    name = "broken"
'''


def test_a_third_party_type_registers_the_same_way(plugin_dir: Path) -> None:
    _install(plugin_dir, "sftp_get = cz_test_plugin:SftpStep\nbroken = cz_test_plugin:NotAStep\n"
             "missing = cz_test_plugin_nowhere:Step\n", PLUGIN)
    types = registry()
    assert "sftp_get" in types and set(BUILT_INS) <= set(types)
    config = types["sftp_get"].Config.model_validate(
        {"name": "get", "type": "sftp_get", "host": "files.example.org"})
    assert config.timeout.total_seconds() == 3600
    errors = registry_errors()
    assert len(errors) == 2
    assert any("'broken'" in e and "not a StepType subclass" in e for e in errors)
    assert any("'missing'" in e and "failed to load" in e for e in errors)


def test_a_broken_plugin_is_a_warning_in_validation(plugin_dir: Path, tmp_path: Path) -> None:
    from cadenza.config import validate_home

    _install(plugin_dir, "missing = cz_test_plugin_nowhere:Step\n", PLUGIN)
    home = tmp_path / "home"
    home.mkdir()
    (home / "cadenza.toml").write_text("# defaults\n")
    (home / "jobs.toml").write_text("# none\n")
    problems = validate_home(home)
    assert [(p.file, p.severity) for p in problems] == [("jobs.toml", "warning")]
    assert "failed to load" in problems[0].message
