"""The config writer's edits, byte for byte: every edit the UI and the API offer keeps the
comments, the key order, the inline tables' spacing, the strings' quotes and the file's
line endings of what it does not change."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from config_helpers import MakeHome

from cadenza.config import validate_jobs_text
from cadenza.config.writer import delete_job, read_document, set_job, set_preset, write_document

ORIGINAL = """\
# Cadenza jobs — edited by hand and from the UI

[jobs.nightly]  # the main load
schedule = "0 2 * * *"  # 02:00 Paris
timezone = "Europe/Paris"
params = {period="${month.current}",zone='UTC'}
retry = { attempts = 3 }
tags = [
    "sales",
]

# the steps run in order
[[jobs.nightly.steps]]
name = "load"  # first step
type = "sql_query"
connection = "warehouse"
query = "select 1"

# the report comes second
[[jobs.nightly.steps]]
name = "report"
type = "sql_query"
connection = "warehouse"
query = "select 2"

# weekly clean-up, no schedule yet
[jobs.weekly]
description = 'vacuum the warehouse'

[[jobs.weekly.steps]]
name = "vacuum"
type = "sql_query"
connection = "warehouse"
query = "vacuum"
"""

LOAD = """\
[[jobs.nightly.steps]]
name = "load"  # first step
type = "sql_query"
connection = "warehouse"
query = "select 1"
"""

REPORT = """\
[[jobs.nightly.steps]]
name = "report"
type = "sql_query"
connection = "warehouse"
query = "select 2"
"""

Change = Callable[[dict[str, Any]], object]


def _edited(job_id: str, change: Change, text: str = ORIGINAL) -> str:
    """``text`` after the job's table, as plain values, is changed and set back."""
    doc = tomlkit.parse(text)
    table = doc["jobs"][job_id].unwrap()
    change(table)
    set_job(doc, job_id, table)
    return doc.as_string()


def _replaced(old: str, new: str, text: str = ORIGINAL) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.fixture
def home(make_home: MakeHome) -> Path:
    return make_home(jobs=ORIGINAL)


# -- keys ---------------------------------------------------------------------------------
def test_an_unchanged_table_changes_nothing() -> None:
    for job_id in ("nightly", "weekly"):
        assert _edited(job_id, lambda table: None) == ORIGINAL


def test_a_new_key_goes_after_the_last_key_not_under_the_next_comment() -> None:
    text = _edited("nightly", lambda t: t.update(enabled=False))
    assert text == _replaced('    "sales",\n]\n\n# the steps',
                             '    "sales",\n]\nenabled = false\n\n# the steps')


def test_a_new_key_is_written_like_its_neighbours() -> None:
    text = "[jobs.x]  # x\n  a=1\n  b=2  # two\n"
    assert _edited("x", lambda t: t.update(c=3), text) == \
        "[jobs.x]  # x\n  a=1\n  b=2  # two\n  c=3\n"


def test_a_changed_key_keeps_its_place_and_its_comment() -> None:
    text = _edited("nightly", lambda t: t.update(schedule="30 2 * * *"))
    assert text == _replaced('schedule = "0 2 * * *"  # 02:00 Paris',
                             'schedule = "30 2 * * *"  # 02:00 Paris')


def test_a_removed_key_takes_only_its_line() -> None:
    text = _edited("nightly", lambda t: t.pop("timezone"))
    assert text == _replaced('timezone = "Europe/Paris"\n', "")


def test_a_schedule_added_to_a_job_that_had_none() -> None:
    text = _edited("weekly", lambda t: t.update(schedule="0 3 * * 0"))
    assert text == _replaced("description = 'vacuum the warehouse'\n",
                             "description = 'vacuum the warehouse'\n"
                             'schedule = "0 3 * * 0"\n')


def test_a_key_added_to_a_job_written_as_its_steps_only_gets_a_header() -> None:
    text = "# intro\n[[jobs.x.steps]]\nname = 'a'\n\n# next\n[jobs.y]\nz = 1\n"
    assert _edited("x", lambda t: t.update(schedule="@daily"), text) == (
        "# intro\n[jobs.x]\nschedule = \"@daily\"\n\n[[jobs.x.steps]]\nname = 'a'\n\n"
        "# next\n[jobs.y]\nz = 1\n")


def test_the_enable_switch_writes_enabled_and_keeps_its_comment() -> None:
    disabled = _edited("nightly", lambda t: t.update(enabled=False))
    text = _replaced("enabled = false\n", "enabled = false  # until the migration\n",
                     disabled)
    assert _edited("nightly", lambda t: t.update(enabled=True), text) == \
        _replaced("enabled = false  #", "enabled = true  #", text)


def test_a_file_without_a_last_newline() -> None:
    assert _edited("x", lambda t: t.update(b=2), "[jobs.x]\na = 1") == \
        "[jobs.x]\na = 1\nb = 2\n"


# -- values in their own style --------------------------------------------------------------
def test_inline_tables_keep_their_spacing() -> None:
    text = _edited("nightly", lambda t: t.update(retry={"attempts": 5, "base_seconds": 10}))
    assert text == _replaced("retry = { attempts = 3 }",
                             "retry = { attempts = 5, base_seconds = 10 }")
    text = _edited("nightly", lambda t: t.update(
        params={"period": "${month.previous}", "zone": "UTC", "n": 2}))
    assert text == _replaced("""params = {period="${month.current}",zone='UTC'}""",
                             """params = {period="${month.previous}",zone='UTC',n=2}""")
    text = _edited("nightly", lambda t: t.update(params={"zone": "UTC"}))
    assert text == _replaced("""params = {period="${month.current}",zone='UTC'}""",
                             "params = {zone='UTC'}")


def test_literal_strings_and_arrays_over_lines_keep_their_form() -> None:
    text = _edited("weekly", lambda t: t.update(description="vacuum it all"))
    assert text == _replaced("'vacuum the warehouse'", "'vacuum it all'")
    text = _edited("nightly", lambda t: t.update(tags=["sales", "daily"]))
    assert text == _replaced('    "sales",\n]', '    "sales",\n    "daily",\n]')


# -- steps -----------------------------------------------------------------------------------
def test_a_new_step_goes_after_the_last_one_above_the_next_jobs_comment() -> None:
    step = {"name": "mail", "type": "sql_query", "connection": "warehouse",
            "query": "select 3"}
    text = _edited("nightly", lambda t: t["steps"].append(step))
    assert text == _replaced(REPORT, REPORT + "\n" + REPORT.replace("report", "mail")
                             .replace("select 2", "select 3"))


def test_a_changed_step_keeps_its_comments() -> None:
    text = _edited("nightly", lambda t: t["steps"][0].update(query="select 10"))
    assert text == _replaced('query = "select 1"\n', 'query = "select 10"\n')


def test_a_removed_step_takes_the_comment_just_above_it() -> None:
    text = _edited("nightly", lambda t: t["steps"].pop(1))
    assert text == _replaced("\n# the report comes second\n" + REPORT, "")
    text = _edited("nightly", lambda t: t["steps"].pop(0))
    assert text == _replaced(LOAD + "\n", "")


def test_a_reordered_step_moves_with_its_comments() -> None:
    text = _edited("nightly", lambda t: t["steps"].reverse())
    assert text == _replaced(
        f"# the steps run in order\n{LOAD}\n# the report comes second\n{REPORT}",
        f"# the steps run in order\n# the report comes second\n{REPORT}\n{LOAD}")


def test_a_renamed_step_keeps_its_place_and_comment() -> None:
    text = _edited("nightly", lambda t: t["steps"][0].update(name="extract"))
    assert text == _replaced('name = "load"  # first step', 'name = "extract"  # first step')


# -- presets, new and deleted jobs ----------------------------------------------------------
def test_a_preset_goes_after_the_jobs_tables(home: Path) -> None:
    doc = tomlkit.parse(ORIGINAL)
    set_preset(doc, "nightly", "month-end", {"schedule": "0 6 1 * *",
                                             "params": {"period": "${month.previous}"}})
    text = doc.as_string()
    assert text == _replaced(REPORT, REPORT + '\n[jobs.nightly.presets.month-end]\n'
                             'schedule = "0 6 1 * *"\n'
                             'params = {period = "${month.previous}"}\n')
    assert validate_jobs_text(home, text) == []


def test_a_preset_changed_in_place_when_other_tables_follow() -> None:
    text = ("[jobs.a]\nx = 1\n\n[jobs.a.presets.p]  # p\nschedule = 'a'  # s\n\n"
            "# the steps\n[[jobs.a.steps]]\nname = 'n'\n")
    doc = tomlkit.parse(text)
    set_preset(doc, "a", "p", {"schedule": "b"})
    assert doc.as_string() == text.replace("'a'  # s", "'b'  # s")
    set_preset(doc, "a", "q", {"schedule": "c"})
    assert doc.as_string() == text.replace("'a'  # s", "'b'  # s").replace(
        "\n# the steps", '\n[jobs.a.presets.q]\nschedule = "c"\n\n# the steps')


def test_a_new_job_goes_at_the_end() -> None:
    doc = tomlkit.parse(ORIGINAL)
    set_job(doc, "hourly", {"schedule": "@hourly", "steps": [{"name": "ping", "type": "x"}]})
    assert doc.as_string() == ORIGINAL + (
        '\n[jobs.hourly]\nschedule = "@hourly"\n\n'
        '[[jobs.hourly.steps]]\nname = "ping"\ntype = "x"\n')
    doc = tomlkit.parse("# only a comment\n")
    set_job(doc, "x", {"a": 1})
    assert doc.as_string() == "# only a comment\n\n[jobs.x]\na = 1\n"


def test_deleting_a_job_in_the_middle_keeps_the_next_ones_comment() -> None:
    text = ("[jobs.a]\na = 1\n\n# about b\n[jobs.b]\nb = 1\n\n"
            "# about c\n[jobs.c]  # c\nc = 1\n")
    doc = tomlkit.parse(text)
    delete_job(doc, "b")
    assert doc.as_string() == "[jobs.a]\na = 1\n\n# about c\n[jobs.c]  # c\nc = 1\n"
    with pytest.raises(KeyError):
        delete_job(doc, "b")


def test_deleting_the_first_job_takes_the_comment_just_above_it() -> None:
    text = "# the catalogue\n\n# about a\n[jobs.a]\na = 1\n\n# about b\n[jobs.b]\nb = 1\n"
    doc = tomlkit.parse(text)
    delete_job(doc, "a")
    assert doc.as_string() == "# the catalogue\n\n# about b\n[jobs.b]\nb = 1\n"


# -- layouts the rebuild leaves to tomlkit --------------------------------------------------
def test_a_job_written_with_dotted_keys_is_edited_or_refused_never_garbled() -> None:
    doc = tomlkit.parse("jobs.x.a = 1\n")
    try:
        set_job(doc, "x", {"a": 1, "b": 2})
    except ValueError as exc:  # older tomlkit versions write this layout wrongly
        assert "edit its text instead" in str(exc)
    else:
        assert tomllib.loads(doc.as_string()) == {"jobs": {"x": {"a": 1, "b": 2}}}


def test_a_job_whose_tables_are_split_apart_is_written_in_one_piece() -> None:
    text = ("[jobs.a]\nx = 1\n\n[jobs.a.presets.p]\ns = 1\n\n[jobs.a.retry]\nattempts = 2\n\n"
            "[jobs.a.presets.q]\ns = 2\n\n# about b\n[jobs.b]\ny = 1\n")
    assert _edited("a", lambda t: t.update(x=2), text) == (
        "[jobs.a]\nx = 2\n\n[jobs.a.presets.p]\ns = 1\n\n[jobs.a.presets.q]\ns = 2\n\n"
        "[jobs.a.retry]\nattempts = 2\n\n# about b\n[jobs.b]\ny = 1\n")


# -- the file ----------------------------------------------------------------------------------
def test_a_crlf_file_stays_crlf_byte_for_byte(home: Path) -> None:
    path = home / "jobs.toml"
    path.write_bytes(ORIGINAL.replace("\n", "\r\n").encode())
    doc, base = read_document(path)
    weekly = doc["jobs"]["weekly"].unwrap()
    weekly["schedule"] = "0 3 * * 0"
    weekly["steps"].append({"name": "analyze", "type": "sql_query",
                            "connection": "warehouse", "query": "analyze"})
    set_job(doc, "weekly", weekly)
    write_document(path, doc, base_hash=base,
                   validate=lambda text: validate_jobs_text(home, text))
    expected = ORIGINAL.replace("'vacuum the warehouse'\n",
                                "'vacuum the warehouse'\nschedule = \"0 3 * * 0\"\n") + (
        '\n[[jobs.weekly.steps]]\nname = "analyze"\ntype = "sql_query"\n'
        'connection = "warehouse"\nquery = "analyze"\n')
    assert path.read_bytes() == expected.replace("\n", "\r\n").encode()


def test_text_posted_with_crlf_into_an_lf_file_stays_lf(home: Path) -> None:
    path = home / "jobs.toml"
    _, base = read_document(path)
    typed = ORIGINAL.replace("# the steps run in order", "# typed in the TOML tab")
    write_document(path, typed.replace("\n", "\r\n"), base_hash=base)
    assert path.read_bytes() == typed.encode()


# -- the tomlkit versions ------------------------------------------------------------------
#: The versions whose output this writer was compared on, byte for byte, with the edits of
#: this file (tomlkit changed how it parses inline tables in 0.15: the rebuild does not
#: depend on it). pyproject.toml asks for tomlkit>=0.12,<1.
CHECKED = ("0.12.0", "0.12.5", "0.13.3", "0.14.0", "0.15.3")


def test_the_installed_tomlkit_is_in_the_checked_range() -> None:
    """A tomlkit outside 0.12.0 - 0.15.x has not been checked: run this file and
    test_tomledit_property.py with it (they are what "checked" means; a comment removed
    from the root, tomlbody.blank_out, is the one edit with no public API of its own) and
    extend CHECKED."""
    installed = tuple(int(part) for part in re.findall(r"\d+", tomlkit.__version__)[:2])
    assert (0, 12) <= installed <= (0, 15), (
        f"tomlkit {tomlkit.__version__} is outside the versions checked: {CHECKED}")
