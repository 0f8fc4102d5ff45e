"""Messages rendered from the templates: job, run, state, trigger, the scheduled time in the
job's zone, the failing step and its error, the link; a home's template overrides the
built-in one; secrets are redacted from every part."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from cadenza.audit.redact import Redactor
from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Settings
from cadenza.domain.states import RunState, StepState
from cadenza.notify.messages import Facts, Renderer
from cadenza.store.records import RunRecord, StepRunRecord

T = datetime(2027, 1, 5, 1, 0, tzinfo=UTC)


def run(state: RunState = RunState.FAILED, error: str | None = None) -> RunRecord:
    return RunRecord("01RUN", "sales-load", state, "scheduled", "job", T, T, T, T, None, 0,
                     {}, {}, None, error, None, None, None, None, 1, 1, 0, T)


def step(name: str, state: StepState, error: str | None = None) -> StepRunRecord:
    return StepRunRecord(1, "01RUN", name, "python", 1, state, None, T, T, T, None, None,
                         error, None, T)


def config(tmp_path: Path, base_url: str | None = "https://cz.example.org/") -> LoadedConfig:
    settings = Settings.model_validate({"server": {"base_url": base_url}} if base_url else {})
    job = JobConfig.model_validate({"id": "sales-load", "timezone": "Europe/Paris"})
    return LoadedConfig(tmp_path, settings, {"sales-load": job})


def test_a_failure_names_everything_in_the_jobs_zone(tmp_path: Path) -> None:
    facts = Facts("failed", "sales-load", run(), (
        step("load-file", StepState.SUCCEEDED),
        step("refresh", StepState.FAILED, "relation sales_agg does not exist")))
    message = Renderer(tmp_path, Redactor()).render(facts, config(tmp_path))
    assert message.subject == "[cadenza] sales-load failed (2027-01-05 02:00 CET " \
                              "(Europe/Paris))"
    for line in ("Job:        sales-load", "Run:        01RUN", "State:      FAILED",
                 "Trigger:    scheduled", "Scheduled:  2027-01-05 02:00 CET (Europe/Paris)",
                 "Failed step: refresh", "Error:      relation sales_agg does not exist",
                 "https://cz.example.org/runs/01RUN"):
        assert line in message.text, line
    assert message.html is not None and 'href="https://cz.example.org/runs/01RUN"' in message.html
    assert message.fields["failing_step"] == "refresh"
    assert message.fields["link"] == "https://cz.example.org/runs/01RUN"


def test_without_base_url_there_is_no_link(tmp_path: Path) -> None:
    message = Renderer(tmp_path, Redactor()).render(Facts("missed", "sales-load", run(
        RunState.MISSED)), config(tmp_path, None))
    assert "/runs/" not in message.text and message.fields["link"] is None
    assert "missed its scheduled run" in message.subject


def test_html_escapes_what_it_shows(tmp_path: Path) -> None:
    facts = Facts("failed", "sales-load", run(error="<script>alert(1)</script>"))
    message = Renderer(tmp_path, Redactor()).render(facts, config(tmp_path))
    assert message.html is not None and "<script>" not in message.html
    assert "&lt;script&gt;" in message.html


def test_a_home_template_overrides_and_secrets_are_redacted(tmp_path: Path) -> None:
    folder = tmp_path / "templates" / "notify"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("ALERT {{ job }}: {{ error }}")
    facts = Facts("failed", "sales-load", run(error="password=Sup3rS3cret! refused"))
    message = Renderer(tmp_path, Redactor(["Sup3rS3cret!"])).render(facts, config(tmp_path))
    assert message.subject == "ALERT sales-load: password=*** refused"
    assert "Sup3rS3cret!" not in message.text + (message.html or "") + repr(message.fields)


def test_a_utc_job_names_its_zone_once(tmp_path: Path) -> None:
    job = JobConfig.model_validate({"id": "sales-load", "timezone": "UTC"})
    loaded = LoadedConfig(tmp_path, Settings.model_validate({}), {"sales-load": job})
    message = Renderer(tmp_path, Redactor()).render(Facts("failed", "sales-load", run()),
                                                    loaded)
    assert message.subject == "[cadenza] sales-load failed (2027-01-05 01:00 UTC)"
    assert "Scheduled:  2027-01-05 01:00 UTC\n" in message.text
    assert "(UTC)" not in message.subject + message.text
