"""The fault harness's fixtures: a private PostgreSQL and a cluster of nodes on it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import service_missing
from tests.faults.cluster import Cluster
from tests.support.pg_cluster import PrivatePostgres, private_postgres


@pytest.fixture
def pg() -> Iterator[PrivatePostgres]:
    if sys.platform == "win32":
        pytest.skip("the fault harness signals and restarts processes the POSIX way")
    with private_postgres() as cluster:
        if cluster is None:
            service_missing("PostgreSQL's server binaries (initdb, pg_ctl)", "not found")
        assert cluster is not None
        yield cluster


@pytest.fixture
def cluster(tmp_path: Path, pg: PrivatePostgres) -> Iterator[Cluster]:
    made = Cluster(tmp_path, pg)
    try:
        made.start()
        yield made
    finally:
        made.close()
