"""Redaction happens before anything is written (SPEC §10, RELIABILITY #37).

The redactor here is a small fake (the real one lives in ``cadenza.audit``): it replaces one
marker string and masks keys named like secrets. The SQLite test then reads the raw database
bytes to prove the secret never reached the disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from tests.support.store_helpers import append_log, end_run, start_run, transition_resource_or_raise

from cadenza.clock import FakeClock
from cadenza.domain.states import ResourceState, RunState, StepState
from cadenza.store import Redactor, Store
from cadenza.store.engine import sqlite_path

SECRET = "hunter2-S3CRET"
KEY_SECRET = "pw-only-under-a-password-key"
CANARY = "visible-canary-7f3a"


class MarkerRedactor:
    """Replaces SECRET in text; masks values under keys like password/token."""

    masked_keys = ("password", "token", "secret", "authorization")

    def redact_text(self, text: str) -> str:
        return text.replace(SECRET, "***")

    def redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {
                k: "***"
                if any(m in str(k).lower() for m in self.masked_keys)
                else self.redact_value(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value


def _write_everything(store: Store) -> str:
    run_id = store.create_run("leaky", "manual", reason=f"asked with {SECRET}")
    assert run_id
    start_run(store, run_id)
    append_log(store, run_id, "INFO", f"connecting to postgresql://app:{SECRET}@db/x")
    append_log(store, run_id, "INFO", f"plain line {CANARY}")
    sid = store._create_step_run(run_id, "call", "http", state=StepState.RUNNING)
    assert store._transition_step_run(
        sid,
        StepState.FAILED,
        reason=f"401 for {SECRET}",
        fields={
            "error": f"HTTP 401: bad token {SECRET}",
            "output": {"headers": {"Authorization": KEY_SECRET}, "body": f"echo {SECRET}"},
        },
    )
    assert end_run(store, run_id, RunState.FAILED, error=f"fatal: {SECRET}", reason=SECRET)
    store.append_event(
        "CONFIG_CHANGED",
        f"connection changed to {SECRET}",
        payload={"password": KEY_SECRET, "nested": [{"token": KEY_SECRET}, SECRET]},
        actor="alice",
    )
    store.upsert_resource("fr-1", "egress", "route")
    transition_resource_or_raise(store,
        "fr-1", ResourceState.COOLDOWN, fields={"last_error": f"proxy {SECRET} refused"}
    )
    return run_id


@pytest.mark.reliability_case(37)
def test_everything_written_is_redacted(store_url: str, clock: FakeClock) -> None:
    redactor: Redactor = MarkerRedactor()
    store = Store.open(store_url, clock=clock, redactor=redactor)
    try:
        run_id = _write_everything(store)
        seen = repr(
            (
                store.get_run(run_id),
                store.list_logs(run_id),
                store.list_step_runs(run_id),
                store.list_events(limit=10_000),
                store.list_resources(),
            )
        )
        with store.read() as conn:
            for table in ("runs", "run_logs", "step_runs", "event_log", "resources"):
                seen += repr(conn.execute(sa.text(f"SELECT * FROM {table}")).all())
    finally:
        store.close()
    assert SECRET not in seen and KEY_SECRET not in seen
    assert CANARY in seen and "***" in seen


def _raw_bytes(sqlite_url: str) -> bytes:
    path = sqlite_path(sa.make_url(sqlite_url))
    assert path is not None
    files = [p for p in path.parent.iterdir() if p.name.startswith(path.name)]
    return b"".join(Path(p).read_bytes() for p in files)


@pytest.mark.reliability_case(56)
def test_the_secret_never_reaches_the_sqlite_file(sqlite_url: str, clock: FakeClock) -> None:
    store = Store.open(sqlite_url, clock=clock, redactor=MarkerRedactor())
    try:
        _write_everything(store)
    finally:
        store.close()
    raw = _raw_bytes(sqlite_url)
    assert CANARY.encode() in raw  # the bytes are readable: the check can fail
    assert SECRET.encode() not in raw
    assert KEY_SECRET.encode() not in raw


def test_without_a_redactor_the_same_writes_would_leak(sqlite_url: str, clock: FakeClock) -> None:
    """The control for the test above: the secret does reach the file when nobody redacts."""
    store = Store.open(sqlite_url, clock=clock)
    try:
        _write_everything(store)
    finally:
        store.close()
    raw = _raw_bytes(sqlite_url)
    assert SECRET.encode() in raw and KEY_SECRET.encode() in raw
