"""``simulate`` with resource pools: runs that need members wait for them, and say why."""

from __future__ import annotations

from datetime import timedelta

from scheduler_helpers import at, job, jobs

from cadenza.config.admission_limits import limits_from_settings
from cadenza.config.schema_settings import Settings
from cadenza.scheduler.simulate import SimulatedPool, simulate


def test_runs_wait_for_a_pool_and_the_reason_names_it() -> None:
    config = jobs(job("a", schedule="0 * * * *", timezone="UTC", max_concurrency=5),
                  job("b", schedule="0 * * * *", timezone="UTC", max_concurrency=5),
                  job("c", schedule="0 * * * *", timezone="UTC", max_concurrency=5))
    limits = limits_from_settings(Settings.model_validate({}), config, "UTC")
    fires = simulate(config, limits, at("2027-03-01T01:00:00+00:00"),
                     at("2027-03-01T02:00:00+00:00"), workers=8,
                     durations={k: timedelta(minutes=10) for k in config},
                     needs={"a": {"egress": 1}, "b": {"egress": 1}, "c": {"egress": 1}},
                     pools={"egress": SimulatedPool(2, timedelta(minutes=5))})
    got = {f.job: (f.outcome, f.start.strftime("%H:%M") if f.start else None, f.wait_reason)
           for f in fires}
    assert got["a"] == ("run", "01:00", None)
    assert got["b"] == ("run", "01:00", None)
    # Both members held for 10 minutes, then cooling down 5: c starts at 01:15.
    assert got["c"] == ("run", "01:15", "waiting for 1 of pool egress: 2 leased by runs "
                                        "sim-000000000, sim-000000001")


def test_a_pool_without_members_never_lets_a_run_start() -> None:
    config = jobs(job("a", schedule="0 * * * *", timezone="UTC"))
    limits = limits_from_settings(Settings.model_validate({}), config, "UTC")
    fires = simulate(config, limits, at("2027-03-01T01:00:00+00:00"),
                     at("2027-03-01T02:00:00+00:00"), workers=8,
                     needs={"a": {"units": 1}}, pools={"units": SimulatedPool(0, timedelta(0))})
    assert [(f.outcome, f.wait_reason) for f in fires] == [
        ("skipped", "waiting for 1 of pool units: the pool has no members")]
