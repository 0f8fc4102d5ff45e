"""A job's definition over the API keeps every key of every step type, and saving what was
loaded leaves jobs.toml byte for byte as it was (comments, short forms, left-out defaults)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.web.api_env import ApiEnv, api_env

from cadenza.steps.base import StepConfig
from cadenza.steps.registry import registry

BUILT_INS = {"call_job", "file_export", "file_load", "http", "ldap_sync", "notify", "python",
             "report", "sql_copy", "sql_query"}

LDAP = """
[connections.directory]
type = "ldap"
url = "ldap://127.0.0.1:389"
"""

EVERY_TYPE = '''
# One step of each built-in type, written as a person would (comments, short forms,
# defaults left out).
[jobs.every-type]
description = "One step of each type"
timeout = "90m"                   # shown as 1h30m

[jobs.every-type.params]
period = "2027-03"
since = 2027-03-01                # a date parameter, shown as "2027-03-01"

[[jobs.every-type.steps]]
name = "call"
type = "call_job"
job = "hello"
wait = false

[[jobs.every-type.steps]]
name = "export"
type = "file_export"
connection = "warehouse"
query = "select 1 as one"
path = "out/one.csv"
csv = { delimiter = ";" }         # the other CSV keys are defaults

[[jobs.every-type.steps]]
name = "load"
type = "file_load"
path = "in/${params.period}.csv"
connection = "warehouse"
table = "staging"
mode = "upsert"
key = "id"                        # read as ["id"]

[[jobs.every-type.steps]]
name = "hook"
type = "http"
url = "https://hooks.example.org/done"
method = "POST"
json = { period = "${params.period}" }
expect = [204]
timeout = "30s"

[[jobs.every-type.steps]]
name = "people"
type = "ldap_sync"
connection = "directory"
base = "dc=example,dc=org"
target = { connection = "warehouse", table = "people", key = "uid" }
attributes = ["uid", "cn"]

[[jobs.every-type.steps]]
name = "tell"
type = "notify"
to = "role:ops"                   # read as ["role:ops"]
subject = "loaded ${params.period}"

[[jobs.every-type.steps]]
name = "count"
type = "python"
callable = "demo_tasks:count"
op_kwargs = { upto = 3 }
retry = { attempts = 2 }          # the other keys follow the job's

[[jobs.every-type.steps]]
name = "summary"
type = "report"
path = "reports/summary.html"
sections = [{ title = "Rows", connection = "warehouse", query = "select 1 as n" }]

[[jobs.every-type.steps]]
name = "copy"
type = "sql_copy"
source = { connection = "warehouse", table = "staging" }
target = { connection = "warehouse", table = "staging_copy" }

[[jobs.every-type.steps]]
name = "query"
type = "sql_query"
connection = "warehouse"
query = """
select count(*) from staging
"""
enabled = false
'''


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    """The demo home plus an LDAP connection and the job ``every-type``."""
    with api_env(tmp_path) as made:
        home = made.services.home.path
        settings = home / "cadenza.toml"
        settings.write_text(settings.read_text(encoding="utf-8") + LDAP, encoding="utf-8")
        jobs = made.services.home.jobs_file
        jobs.write_text(jobs.read_text(encoding="utf-8") + EVERY_TYPE, encoding="utf-8")
        yield made


def toml_names(config: type[StepConfig]) -> set[str]:
    return {info.alias or name for name, info in config.model_fields.items()}


def contains(shown: Any, written: Any) -> bool:
    """``shown`` holds every key of ``written`` with its value (tables key by key, arrays
    item by item)."""
    if isinstance(written, dict):
        return isinstance(shown, dict) and all(
            key in shown and contains(shown[key], value) for key, value in written.items())
    if isinstance(written, list):
        return isinstance(shown, list) and len(shown) == len(written) and all(
            contains(a, b) for a, b in zip(shown, written, strict=True))
    return bool(shown == written)


def test_every_step_shows_every_key_of_its_own_type(env: ApiEnv) -> None:
    answer = env.session("viewer").get("/api/jobs/every-type")
    assert answer.status_code == 200, answer.text
    shown = answer.json()["definition"]
    assert shown["params"] == {"period": "2027-03", "since": "2027-03-01"}
    assert shown["timeout"] == "1h30m" and "id" in shown
    steps = shown["steps"]
    assert {step["type"] for step in steps} == BUILT_INS
    written: dict[str, dict[str, Any]] = {
        s["name"]: s for s in env.services.config().jobs["every-type"].model_dump(
            by_alias=True, exclude_unset=True, mode="json")["steps"]}
    for step in steps:
        config = registry()[step["type"]].Config
        own = toml_names(config) - toml_names(StepConfig)
        assert own, step["type"]
        expected = config.model_validate(step)  # what it shows is a valid step of its type
        unset = {k for k, v in expected.model_dump(by_alias=True).items() if v is None}
        assert set(step) == toml_names(config) - unset, step["type"]
        assert own - unset <= set(step)
        # every key the file sets comes back with its value
        assert contains(step, written[step["name"]]), step["type"]
    by_name = {step["name"]: step for step in steps}
    assert by_name["count"]["callable"] == "demo_tasks:count"
    assert by_name["hook"]["url"] == "https://hooks.example.org/done"
    assert by_name["hook"]["json"] == {"period": "${params.period}"}  # its TOML name
    assert by_name["load"]["key"] == ["id"] and by_name["tell"]["to"] == ["role:ops"]
    assert by_name["export"]["csv"]["delimiter"] == ";"
    assert by_name["people"]["target"] == {"connection": "warehouse", "table": "people",
                                           "key": "uid"}


def test_saving_what_was_loaded_leaves_the_file_byte_identical(env: ApiEnv) -> None:
    editor = env.session("editor")
    jobs_file = env.services.home.jobs_file
    before = jobs_file.read_bytes()
    ids = [job["id"] for job in editor.get("/api/jobs").json()]
    assert "every-type" in ids and "sales-load" in ids
    for job_id in ids:
        shown = editor.get(f"/api/jobs/{job_id}").json()
        saved = editor.put(f"/api/jobs/{job_id}", json={"definition": shown["definition"],
                                                        "base_hash": shown["hash"]})
        assert saved.status_code == 200, (job_id, saved.text)
        assert saved.json()["hash"] == shown["hash"], job_id
        assert jobs_file.read_bytes() == before, "".join(difflib.unified_diff(
            before.decode().splitlines(True), jobs_file.read_text().splitlines(True)))
    again = editor.get("/api/jobs/every-type").json()["definition"]
    assert {s["type"] for s in again["steps"]} == BUILT_INS


def test_a_changed_key_rewrites_its_line_only(env: ApiEnv) -> None:
    editor = env.session("editor")
    jobs_file = env.services.home.jobs_file
    before = jobs_file.read_text(encoding="utf-8")
    shown = editor.get("/api/jobs/every-type").json()
    definition = shown["definition"]
    steps = {step["name"]: step for step in definition["steps"]}
    steps["count"]["callable"] = "demo_tasks:check_profile"
    steps["count"]["retry"]["attempts"] = 4
    steps["hook"]["expect"] = ["2xx"]
    steps["people"]["target"]["table"] = "staff"
    saved = editor.put("/api/jobs/every-type", json={"definition": definition,
                                                     "base_hash": shown["hash"]})
    assert saved.status_code == 200, saved.text
    after = jobs_file.read_text(encoding="utf-8")
    # compared without blanks: how the writer spaces a rewritten inline table is its own
    changed = [re.sub(r"\s+", "", line)
               for line in difflib.ndiff(before.splitlines(), after.splitlines())
               if line[:2] in ("- ", "+ ")]
    assert changed == [re.sub(r"\s+", "", line) for line in [
        '- expect = [204]', '+ expect = ["2xx"]',
        '- target = { connection = "warehouse", table = "people", key = "uid" }',
        '+ target = { connection = "warehouse", table = "staff", key = "uid" }',
        '- callable = "demo_tasks:count"', '+ callable = "demo_tasks:check_profile"',
        '- retry = { attempts = 2 }          # the other keys follow the job\'s',
        '+ retry = { attempts = 4 }          # the other keys follow the job\'s',
    ]], changed
    count = env.services.config().jobs["every-type"].step("count")
    assert count is not None and count.retry is not None
    assert count.retry.model_fields_set == {"attempts"}  # still follows the job's backoff
