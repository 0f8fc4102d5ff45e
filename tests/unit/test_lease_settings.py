"""``[workers].lease`` (config/schema_settings.py; docs/leases.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from cadenza.config.schema_settings import Settings


def test_the_lease_defaults_to_60s_and_takes_a_duration() -> None:
    assert Settings().workers.lease == timedelta(seconds=60)
    assert Settings.model_validate({"workers": {"lease": "3s"}}).workers.lease == \
        timedelta(seconds=3)


@pytest.mark.parametrize(("value", "message"), [
    ("2s", 'at least "3s"'), ("2h", 'at most "1h"'), ("soon", "duration")])
def test_a_bad_lease_is_refused_naming_the_field(value: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"workers": {"lease": value}})
    assert "workers.lease" in str(caught.value) and message in str(caught.value)
