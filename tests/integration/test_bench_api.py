"""bench/api.py (W6) at a tiny size: its fill writes what it says and its store calls run.

The benchmark itself is not a test (docs/benchmarks.md); this keeps its fill and query path
from rotting between measurements, in about a second.
"""

from __future__ import annotations

import importlib
import random
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from cadenza.store import Store
from cadenza.store.tables import event_log, runs, step_runs

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module(name)


def test_the_w6_fill_and_its_store_calls(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fill = _bench(monkeypatch, "api_fill")
    api = _bench(monkeypatch, "api")
    url = f"sqlite:///{(tmp_path / 'w6.db').as_posix()}"
    info = fill.fill(url, 2000, 6000, 5)
    store = Store.open(url)
    try:
        with store.read() as c:
            def count(table: sa.Table) -> int:
                return int(c.execute(sa.select(sa.func.count()).select_from(table))
                           .scalar_one())

            assert (count(runs), count(event_log)) == (2000, 6000)
            assert count(step_runs) == info.step_runs > 1800
            states = dict(c.execute(sa.select(runs.c.state, sa.func.count())
                                    .group_by(runs.c.state)).all())
            newest_first = list(c.execute(sa.select(runs.c.id).order_by(
                runs.c.created_at.desc(), runs.c.id.desc())).scalars())
        assert states == info.counts_by_state
        assert {"SUCCEEDED", "FAILED", "MISSED", "CANCELED"} <= set(states)
        assert newest_first == sorted(newest_first, reverse=True)  # ids follow time
        assert len(info.jobs) == 5 and len(info.sample_runs) == 1000
        timed = api.direct(store, info, 3)
        assert set(timed) >= set(api.API_PATHS)
        path = api.pick(api.API_PATHS["runs_deep_page"], info, random.Random(1))
        assert path.startswith("/api/runs?cursor=") and path.split("=")[1][:26] in \
            info.deep_runs
    finally:
        store.close()
