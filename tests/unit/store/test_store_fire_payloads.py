"""The creation events written in bulk are redacted exactly as create_run redacts them:
``dumps(redactor.redact_value(payload))``, built item by item from per-batch memos."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cadenza.audit.redact import Redactor
from cadenza.domain.states import RunState
from cadenza.store.codec import dumps
from cadenza.store.fires import _Redactions
from cadenza.store.run_states import creation_event

SECRET = "hunter2-S3CRET"
AT = datetime(2027, 3, 1, 8, tzinfo=UTC)


class MasksReason:
    """A redactor that treats the key ``reason`` as secret: payloads go through whole."""

    def redact_text(self, text: str) -> str:
        return text.replace(SECRET, "***")

    def redact_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: "***" if k == "reason" else self.redact_value(v) for k, v in value.items()}
        return self.redact_text(value) if isinstance(value, str) else value


def _payloads() -> list[dict[str, Any]]:
    overrides = [{}, {"preset": "x", "params": {"password": "p", "dsn": f"pg://u:{SECRET}@h/d"}}]
    times = [AT, AT + timedelta(minutes=1), AT.astimezone(ZoneInfo("Europe/Paris"))]
    out = []
    for job, state, override, priority, not_before, reason in itertools.product(
        ["a", SECRET], [RunState.QUEUED, RunState.MISSED], overrides, [0, -3, True],
        [None, *times], [None, f"token={SECRET}", "overlap: busy"],
    ):
        for when in times:
            out.append(creation_event(job, state, "scheduled", "preset:x", when, {}, override,
                                      priority, not_before, reason)[3])
    return out


@pytest.mark.parametrize("redactor", [Redactor([SECRET]), Redactor(), MasksReason()])
def test_payload_text_is_dumps_of_the_redacted_payload(redactor: Any) -> None:
    redact = _Redactions(redactor)
    assert redact.by_item is not isinstance(redactor, MasksReason)
    for payload in _payloads():
        assert redact.payload_json(payload) == dumps(redactor.redact_value(payload))
