"""A job's definition (every key of every step, by the step's own type, third-party types
included) and what saving a definition writes: the file's spelling wherever the value
shows the same."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

from cadenza.config.definitions import definition, keep_written, table_definition
from cadenza.config.schema_jobs import JobConfig
from cadenza.steps.registry import registry, reload_registry

PLUGIN = '''
from cadenza.config.types import NonEmptyStr
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType


class SftpConfig(StepConfig):
    host: NonEmptyStr
    port: int = 22


class SftpStep(StepType):
    name = "sftp_get"
    Config = SftpConfig
'''


@pytest.fixture
def sftp_plugin(tmp_path: Path) -> Iterator[None]:
    """A third-party distribution on sys.path registering the step type ``sftp_get``."""
    info = tmp_path / "cz_defs_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cz-defs-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[cadenza.steps]\n"
                                           "sftp_get = cz_defs_plugin:SftpStep\n")
    (tmp_path / "cz_defs_plugin.py").write_text(PLUGIN)
    sys.path.insert(0, str(tmp_path))
    reload_registry()
    yield
    sys.path.remove(str(tmp_path))
    sys.modules.pop("cz_defs_plugin", None)
    reload_registry()


def job(*steps: dict[str, Any], **keys: Any) -> dict[str, Any]:
    return {**keys, "steps": list(steps)}


def test_a_third_party_step_shows_its_own_keys(sftp_plugin: None) -> None:
    config = registry()["sftp_get"].Config.model_validate(
        {"name": "get", "type": "sftp_get", "host": "files.example.org"})
    shown = definition(JobConfig(id="fetch").model_copy(update={"steps": [config]}))
    assert shown["steps"] == [{"name": "get", "type": "sftp_get", "enabled": True,
                               "timeout": "1h", "op_kwargs": {}, "requires": {},
                               "host": "files.example.org", "port": 22}]
    assert JobConfig.model_json_schema()["properties"]["steps"]["type"] == "array"


def test_built_in_steps_show_their_toml_names_and_values() -> None:
    shown = table_definition("j", job(
        {"name": "hook", "type": "http", "url": "https://x.org", "json": {"a": 1}},
        {"name": "count", "type": "python", "callable": "tasks:count"}))
    assert shown is not None
    hook, count = shown["steps"]
    assert hook["json"] == {"a": 1} and "json_" not in hook and hook["url"] == "https://x.org"
    assert count["callable"] == "tasks:count" and count["isolation"] == "process"
    assert shown["id"] == "j" and shown["timeout"] == "1d"


def test_an_invalid_table_or_step_has_no_definition() -> None:
    assert table_definition("j", job({"name": "s", "type": "nope"})) is None
    assert table_definition("j", job({"name": "s", "type": "python"})) is None
    assert table_definition("j", job(priority="high")) is None
    assert table_definition("j", {"steps": "count"}) is None


def save(written: dict[str, Any], sent: dict[str, Any],
         shown: dict[str, Any] | None = None) -> dict[str, Any]:
    return keep_written(written, shown or table_definition("j", written), sent,
                        table_definition("j", sent))


def test_what_shows_the_same_keeps_the_file_spelling(sftp_plugin: None) -> None:
    written = job({"name": "get", "type": "sftp_get", "host": "h", "timeout": "90m"},
                  {"name": "load", "type": "file_load", "path": "in/x.csv",
                   "connection": "w", "table": "t", "mode": "upsert", "key": "id"},
                  timeout="120m", retry={"attempts": 2})
    shown = table_definition("j", written)
    assert shown is not None
    assert save(written, shown) == written  # defaults, "90m", key = "id": as written


def test_only_what_changed_is_written_as_sent() -> None:
    written = job({"name": "count", "type": "python", "callable": "t:count"},
                  {"name": "old", "type": "python", "callable": "t:old"},
                  timeout="120m", retry={"attempts": 2}, tags=["a"])
    sent = table_definition("j", written)
    assert sent is not None
    sent["steps"][0]["callable"] = "t:other"
    sent["retry"]["backoff"] = "fixed"
    sent["steps"][1] = {"name": "new", "type": "python", "callable": "t:new"}
    del sent["tags"]
    assert save(written, sent) == job(
        {"name": "count", "type": "python", "callable": "t:other"},
        {"name": "new", "type": "python", "callable": "t:new"},
        timeout="120m", retry={"attempts": 2, "backoff": "fixed"})


def test_a_redacted_value_sent_back_keeps_the_file_value() -> None:
    written = job({"name": "count", "type": "python", "callable": "t:count",
                   "op_kwargs": {"api_key": "${params.key}", "n": 1}},
                  params={"key": "k"})
    shown = table_definition("j", written)
    assert shown is not None
    shown["steps"][0]["op_kwargs"]["api_key"] = "***"  # as the redactor shows it
    sent = {**shown, "steps": [{**shown["steps"][0],
                                "op_kwargs": {"api_key": "***", "n": 2}}]}
    saved = save(written, sent, shown)
    assert saved["steps"][0]["op_kwargs"] == {"api_key": "${params.key}", "n": 2}


def test_an_invalid_definition_is_written_as_sent() -> None:
    written = job({"name": "count", "type": "python", "callable": "t:count"})
    sent = job({"name": "count", "type": "python"}, timeout="1h")
    assert save(written, sent) == sent  # the configuration check says what is wrong


def test_a_changed_date_parameter_stays_a_date() -> None:
    written = job({"name": "count", "type": "python", "callable": "t:count"},
                  params={"since": date(2027, 3, 1), "at": datetime(2027, 3, 1, 6, 0),
                          "label": "2027-03-01"})
    sent = table_definition("j", written)
    assert sent is not None and sent["params"]["since"] == "2027-03-01"
    sent["params"] = {"since": "2027-04-01", "at": "2027-04-01T07:30:00",
                      "label": "2027-04-01"}
    assert save(written, sent)["params"] == {
        "since": date(2027, 4, 1), "at": datetime(2027, 4, 1, 7, 30), "label": "2027-04-01"}
