"""Code only from plugins/: a python step's callable outside the home's plugins/ folder is
refused by `cadenza validate` (exit 1, located, naming the step and the rule) and again when
the step imports it (stdlib names cached in sys.modules, a plugin shadowing `os`, a path
through a module, a re-exported function), unless [security].allowed_callables lists it."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.config import validate_home
from cadenza.domain.errors import Fatal
from cadenza.plugin_code import RULE
from cadenza.steps.builtin.python import load_callable, plugins_first

SETTINGS = '[store]\nurl = "sqlite:///data/cadenza.db"\n'
SNEAKY = "import os\nfrom os import system\n\ndef fine():\n    return 1\n"


def _jobs(spec: str) -> str:
    return (f'[jobs.j]\n[[jobs.j.steps]]\nname = "pwn"\ntype = "python"\n'
            f'callable = "{spec}"\n')


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "cz_sneaky.py").write_text(SNEAKY)
    (tmp_path / "cadenza.toml").write_text(SETTINGS)
    (tmp_path / "jobs.toml").write_text(_jobs("cz_sneaky:fine"))
    yield tmp_path
    for name in ("cz_sneaky",):
        sys.modules.pop(name, None)
    if str(tmp_path / "plugins") in sys.path:
        sys.path.remove(str(tmp_path / "plugins"))


@pytest.mark.parametrize("spec", ["os:system", "subprocess:run", "builtins:eval",
                                  "importlib:import_module", "shutil:rmtree",
                                  "os.path:join", "pydantic:BaseModel"])
def test_cadenza_validate_refuses_code_outside_plugins(home: Path, spec: str) -> None:
    (home / "jobs.toml").write_text(_jobs(spec))
    result = CliRunner().invoke(app, ["--home", str(home), "validate"])
    assert result.exit_code == 1, result.output
    assert "jobs.toml:5:12: error: jobs.j.steps[0].callable: step 'pwn': callable " \
        f"'{spec}' refused" in result.output
    assert RULE in result.output


def test_a_plugin_is_accepted_and_a_plugin_named_os_is_refused(home: Path) -> None:
    assert [p for p in validate_home(home) if p.is_error] == []
    (home / "plugins" / "os.py").write_text("def system(cmd):\n    return 0\n")
    (home / "jobs.toml").write_text(_jobs("os:system"))
    errors = [p for p in validate_home(home) if p.is_error]
    assert len(errors) == 1 and "has the name of the standard library module 'os'" \
        in errors[0].message


def test_allowed_callables_let_an_admin_open_a_package(home: Path) -> None:
    (home / "cadenza.toml").write_text(
        SETTINGS + '[security]\nallowed_callables = ["json:*", "os.path:join"]\n')
    for spec in ("json:dumps", "os.path:join"):
        (home / "jobs.toml").write_text(_jobs(spec))
        assert [p for p in validate_home(home) if p.is_error] == []
    (home / "jobs.toml").write_text(_jobs("os:system"))
    assert any(RULE in p.message for p in validate_home(home) if p.is_error)
    (home / "cadenza.toml").write_text(SETTINGS + '[security]\nallowed_callables = ["*:*"]\n')
    bad = [p for p in validate_home(home) if p.is_error and p.file == "cadenza.toml"]
    assert bad and "module written in full" in bad[0].message


def test_the_import_is_checked_again_at_run_time(home: Path) -> None:
    plugins_first(home)
    assert load_callable("cz_sneaky:fine", home)() == 1
    for spec in ("os:system", "json:dumps", "builtins:eval"):
        with pytest.raises(Fatal, match=re.escape(RULE)):
            load_callable(spec, home)
    with pytest.raises(Fatal, match="reaches the module 'os'"):
        load_callable("cz_sneaky:os.system", home)
    with pytest.raises(Fatal, match="is a function of"):
        load_callable("cz_sneaky:system", home)
    assert load_callable("json:dumps", home, ["json:*"])([]) == "[]"


def test_a_plugin_shadowing_a_cached_stdlib_module_does_not_count(home: Path) -> None:
    (home / "plugins" / "os.py").write_text("def system(cmd):\n    return 0\n")
    plugins_first(home)
    import os

    assert sys.modules["os"] is os  # the standard library's, imported long before
    with pytest.raises(Fatal, match="module 'os' was not imported from plugins/"):
        load_callable("os:system", home)
