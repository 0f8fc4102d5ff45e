"""Job catalogue edits through the service layer: comments and order kept, a stale write
refused, a bad edit refused with located problems and the file left as it was, the
running configuration reloaded, the actor recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.services_home import demo_services

from cadenza.domain.errors import ConfigError, StaleConfigError
from cadenza.services import InvalidRequest, NotFound, Services
from cadenza.services.history import EventQuery
from cadenza.services.jobs import JobService

NEW_JOB = {"description": "said twice", "steps": [
    {"name": "count", "type": "python", "callable": "demo_tasks:count"}]}


class Holder:
    """What a running node offers the services: ``reload()``, here counted."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.reloads = 0

    def reload(self) -> bool:
        self.reloads += 1
        return True


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    with demo_services(tmp_path) as services:
        yield services


def _comments(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def test_create_edit_delete_keep_comments_and_reload(services: Services) -> None:
    holder = Holder(services)
    jobs = JobService(services, on_change=holder.reload)
    before = jobs.document()
    written = jobs.create("twice", NEW_JOB, before.hash)
    assert written.reloaded is True and holder.reloads == 1
    after = jobs.document()
    assert after.hash == written.hash
    assert _comments(after.text) == _comments(before.text)
    assert after.text.index("[jobs.hello]") < after.text.index("[jobs.twice]")

    edited = jobs.edit("twice", {**NEW_JOB, "description": "said three times"}, after.hash)
    assert 'description = "said three times"' in jobs.document().text
    deleted = jobs.delete("twice", edited.hash)
    assert "twice" not in jobs.document().text and deleted.hash != edited.hash
    assert _comments(jobs.document().text) == _comments(before.text)
    assert holder.reloads == 3
    changes = [e for e in services.history.events(EventQuery(type="config_changed"))]
    assert [e.actor for e in changes] == ["user:bob"] * 3


def test_a_stale_write_is_refused_and_changes_nothing(services: Services) -> None:
    jobs = services.jobs
    old = jobs.document()
    jobs.save_preset("hello", "quiet", {"log_level": "WARNING"}, old.hash)
    current = jobs.document()
    assert "[jobs.hello.presets.quiet]" in current.text
    with pytest.raises(StaleConfigError):
        jobs.create("twice", NEW_JOB, old.hash)
    assert jobs.document() == current


def test_a_bad_edit_is_refused_with_located_problems(services: Services) -> None:
    jobs = services.jobs
    before = jobs.document()
    with pytest.raises(ConfigError) as caught:
        jobs.edit("hello", {"steps": [{"name": "count", "type": "nope"}]}, before.hash)
    assert any(str(p).startswith("jobs.toml:") and "unknown step type" in str(p)
               for p in caught.value.problems)
    assert jobs.document() == before
    with pytest.raises(NotFound):
        jobs.delete("nope", before.hash)
    with pytest.raises(InvalidRequest, match="exists"):
        jobs.create("hello", NEW_JOB, before.hash)


@pytest.mark.reliability_case(1)
def test_reload_checks_first(services: Services) -> None:
    holder = Holder(services)
    assert services.configuration.reload(holder) is True
    jobs_file = services.home.jobs_file
    jobs_file.write_text(jobs_file.read_text(encoding="utf-8") + "\n[jobs.bad]\n",
                         encoding="utf-8")
    with pytest.raises(ConfigError):
        services.configuration.reload(holder)
    assert holder.reloads == 1
    assert any(p.file == "jobs.toml" for p in services.configuration.validate())


def test_catalogue_and_next_fires(services: Services) -> None:
    assert [job.id for job in services.jobs.list()] == ["sales-load", "hello",
                                                          "profile-check"]
    preview = services.jobs.next_fires("sales-load", 3, "2027-03-27T00:00:00+01:00")
    assert [s.name for s in preview.schedules] == ["job", "preset:month-end"]
    assert [f.local.isoformat() for f in preview.fires][:2] == [
        "2027-03-27T02:00:00+01:00", "2027-03-28T03:00:00+02:00"]
    now = services.jobs.next_fires("hello")
    assert now.fires == ()
    with pytest.raises(InvalidRequest, match="--from: expected an ISO time"):
        services.jobs.next_fires("sales-load", 1, "soon")


def test_editing_one_job_leaves_another_jobs_dates_spaced_as_written(
        services: Services) -> None:
    """tomlkit renders ``{ since = 2027-03-01 }`` as ``{ since = 2027-03-01}``; an edit of
    another job must not rewrite that line (nor the raw tab show it rewritten)."""
    jobs_file = services.home.jobs_file
    dated = ('\n[jobs.dated]\nparams = { since = 2027-03-01 , n = 1 }\n'
             '[[jobs.dated.steps]]\nname = "count"\ntype = "python"\n'
             'callable = "demo_tasks:count"\n')
    jobs_file.write_text(jobs_file.read_text(encoding="utf-8") + dated, encoding="utf-8")
    jobs = JobService(services)
    before = jobs.document()
    assert before.text == jobs_file.read_text(encoding="utf-8")
    jobs.create("twice", NEW_JOB, before.hash)
    after = jobs_file.read_text(encoding="utf-8")
    assert after.startswith(before.text.rstrip("\n"))
    assert "params = { since = 2027-03-01 , n = 1 }\n" in after
