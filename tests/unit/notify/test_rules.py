"""Which events notify whom: job alerts on failed / needs_review / long_run, rules by job
globs and tags, stalled only through rules."""

from __future__ import annotations

from pathlib import Path

from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Settings
from cadenza.notify.rules import selects, targets_for
from cadenza.store.outbox import Target


def config(rules: list[dict[str, object]], jobs: list[dict[str, object]]) -> LoadedConfig:
    settings = Settings.model_validate({
        "channels": {"mail": {"type": "email", "host": "h", "sender": "c@example.org"},
                     "chat": {"type": "webhook", "url": "https://hooks.example.org/x"}},
        "rules": rules})
    parsed = {j["id"]: JobConfig.model_validate(j) for j in jobs}
    return LoadedConfig(Path("."), settings, parsed)  # type: ignore[arg-type]


JOBS = [
    {"id": "sales-load", "tags": ["sales"],
     "alerts": {"recipients": ["role:ops"], "long_run": "90m"}},
    {"id": "hr-sync", "tags": ["hr"], "alerts": {"recipients": ["hr@example.org"],
                                                 "on_failure": False}},
    {"id": "quiet"},
]
RULES = [
    {"name": "sales", "on": ["failed", "recovered"], "jobs": ["sales-*"],
     "notify": ["lead@example.org"], "channel": "mail"},
    {"name": "hr", "on": ["succeeded", "stalled"], "tags": ["hr"], "notify": ["channel:chat"],
     "channel": "chat"},
]


def test_alerts_then_rules_in_file_order() -> None:
    c = config(RULES, JOBS)
    assert targets_for("failed", "sales-load", c) == [
        Target("alerts", None, ("role:ops",)),
        Target("rule:sales", "mail", ("lead@example.org",))]
    assert targets_for("needs_review", "sales-load", c) == [Target("alerts", None,
                                                                   ("role:ops",))]
    assert targets_for("long_run", "sales-load", c) == [Target("alerts", None, ("role:ops",))]
    assert targets_for("recovered", "sales-load", c) == [
        Target("rule:sales", "mail", ("lead@example.org",))]


def test_on_failure_false_and_no_long_run_send_nothing() -> None:
    c = config(RULES, JOBS)
    assert targets_for("failed", "hr-sync", c) == []
    assert targets_for("long_run", "hr-sync", c) == []
    assert targets_for("succeeded", "hr-sync", c) == [Target("rule:hr", "chat",
                                                             ("channel:chat",))]
    assert targets_for("stalled", "hr-sync", c) == [Target("rule:hr", "chat",
                                                           ("channel:chat",))]
    assert targets_for("failed", "quiet", c) == []
    assert targets_for("missed", "sales-load", c) == []


def test_selects_by_glob_or_tag() -> None:
    job = JobConfig.model_validate({"id": "sales-load", "tags": ["sales"]})
    assert selects(["sales-*"], [], job, "sales-load")
    assert selects([], ["sales"], job, "sales-load")
    assert not selects(["Sales-*"], ["hr"], job, "sales-load")
    assert selects(["*"], [], None, "gone")
