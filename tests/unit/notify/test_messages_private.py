"""A home's notification templates are read from templates/notify/ only: a link there to
data/secret.key, or to a file outside templates/, is refused (the delivery records the
error) and the key is never read into a message."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import jinja2
import pytest

from cadenza.audit.redact import Redactor
from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Settings
from cadenza.domain.states import RunState
from cadenza.notify.messages import Facts, Renderer
from cadenza.private_files import RULE
from cadenza.store.records import RunRecord

T = datetime(2027, 1, 5, 1, 0, tzinfo=UTC)
KEY = "a2V5LW1hdGVyaWFsLW5ldmVyLXJlYWQ="


def _render(home: Path) -> object:
    run = RunRecord("01RUN", "sales-load", RunState.FAILED, "scheduled", "job", T, T, T, T,
                    None, 0, {}, {}, None, "boom", None, None, None, None, 1, 1, 0, T)
    job = JobConfig.model_validate({"id": "sales-load"})
    loaded = LoadedConfig(home, Settings.model_validate({}), {"sales-load": job})
    return Renderer(home, Redactor()).render(Facts("failed", "sales-load", run), loaded)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "secret.key").write_text(KEY)
    (tmp_path / "templates" / "notify").mkdir(parents=True)
    return tmp_path


def test_a_link_to_the_key_is_refused(home: Path) -> None:
    (home / "templates" / "notify" / "body.txt").symlink_to(home / "data" / "secret.key")
    with pytest.raises(jinja2.TemplateError, match=RULE) as caught:
        _render(home)
    assert KEY not in str(caught.value)


def test_a_link_outside_templates_is_refused_and_plain_overrides_work(home: Path) -> None:
    (home / "elsewhere.txt").write_text("{{ job }} from elsewhere")
    (home / "templates" / "notify" / "subject.txt").symlink_to(home / "elsewhere.txt")
    with pytest.raises(jinja2.TemplateError, match="outside the home's templates/ folder"):
        _render(home)
    (home / "templates" / "notify" / "subject.txt").unlink()
    (home / "templates" / "notify" / "subject.txt").write_text("ALERT {{ job }}")
    assert getattr(_render(home), "subject", None) == "ALERT sales-load"
