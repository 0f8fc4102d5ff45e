"""The soak's short version (tests/faults/soak.py; ``make soak MINUTES=30`` for the long
one): three minutes of steady load with a random fault every 40 seconds or so, then the
invariants and the nodes' memory and open files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import service_missing
from tests.faults.soak import soak
from tests.support.pg_cluster import server_binaries


@pytest.mark.timeout(600)
def test_three_minutes_of_faults_keep_the_invariants(tmp_path: Path) -> None:
    if sys.platform == "win32":
        pytest.skip("the soak signals and restarts processes the POSIX way")
    if server_binaries() is None:
        service_missing("PostgreSQL's server binaries (initdb, pg_ctl)", "not found")
    report = soak(tmp_path, minutes=3, seed=11, fault_every=40)
    assert report["ok"], report
    assert len(report["faults"]) >= 3 and report["fires_checked"] >= 2, report
