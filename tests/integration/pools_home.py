"""A home with pools for the pool tests: real files, a real store (SQLite file or the
PostgreSQL database of ``pg_url``), python steps from ``plugins/cz_pool_tasks.py``, a
FakeClock (nothing sleeps for a cooldown)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cadenza.clock import FakeClock
from cadenza.config import LoadedConfig
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.executor.tracking import RunOutcome
from cadenza.home import Home
from cadenza.resources.pools import apply_pools
from cadenza.store import Store
from cadenza.store.records import ResourceRecord

TASKS = '''
"""Python steps of the pool tests (the same text in every test home)."""

import cadenza


def show(ctx):
    """What the step sees of the run's resources."""
    out = {}
    for pool, members in ctx.resources.items():
        out[pool] = [{"id": m.resource_id, "kind": m.kind, "proxy": m.proxy,
                      "region": m.region, "fields": dict(m.fields),
                      "route": m.route.resource_id if m.route else None} for m in members]
    route = ctx.route()
    ctx.log.info("using proxy %s", route.proxy if route else None)
    return {"held": out, "route": route.resource_id if route else None}


def ignore(ctx):
    """A step that never looks at ctx.resources."""
    return {"ok": True}


def refuse_on(ctx, bad, named=True):
    """A ResourceFault while the run holds route ``bad``; succeeds on any other."""
    route = ctx.route()
    if route is not None and route.resource_id == bad:
        raise cadenza.ResourceFault("proxy refused the tunnel",
                                    resource_id=bad if named else None)
    return {"route": route.resource_id if route else None}
'''

POOLS = """
[pools.units]
kind = "unit"
cooldown = "10s"
[[pools.units.members]]
id = "u-1"
route = "fr-1"
[[pools.units.members]]
id = "u-2"
fields = { profile = "p2" }

[pools.egress]
kind = "route"
cooldown = "5s"
[[pools.egress.members]]
id = "fr-1"
proxy = "http://cz:${secret.proxy_pw}@127.0.0.1:3128"
region = "FR"
[[pools.egress.members]]
id = "fr-2"
proxy = "socks5://127.0.0.1:1080"
region = "FR"

[pools.logins]
kind = "credential"
cooldown = "0s"
[[pools.logins.members]]
id = "acct-1"
fields = { user = "alice", password = "${secret.acct_pw}" }
"""

PROXY_PW = "pr0xy-Pa55-word"
ACCT_PW = "acc0unt-Pa55-word"


@dataclass
class PoolBench:
    home: Home
    config: LoadedConfig
    store: Store
    executor: Executor
    clock: FakeClock

    def enqueue(self, job: str) -> str:
        return self.executor.enqueue(job, RunRequest(), trigger="manual:test")

    def execute(self, run_id: str) -> RunOutcome:
        return self.executor.execute(run_id)

    def resource(self, rid: str) -> ResourceRecord:
        found = self.store.get_resource(rid)
        assert found is not None
        return found

    def states(self) -> dict[str, str]:
        return {r.resource_id: r.state.value for r in self.store.list_resources()}

    def resource_events(self, rid: str) -> list[tuple[str, Any, Any]]:
        return [(e.event_type, e.payload.get("from"), e.payload.get("to"))
                for e in self.store.list_events(resource_id=rid)]


def write_home(root: Path, jobs: str, *, store_url: str | None = None,
               pools: str = POOLS) -> Home:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugins").mkdir(exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "plugins" / "cz_pool_tasks.py").write_text(TASKS, encoding="utf-8")
    url = store_url or "sqlite:///data/cadenza.db"
    (root / "cadenza.toml").write_text(f'[store]\nurl = "{url}"\n{pools}', encoding="utf-8")
    (root / "jobs.toml").write_text(textwrap.dedent(jobs), encoding="utf-8")
    home = Home(root.resolve())
    home.secrets.set("proxy_pw", PROXY_PW)
    home.secrets.set("acct_pw", ACCT_PW)
    return home


@contextmanager
def pool_bench(root: Path, jobs: str, *, store_url: str | None = None, pools: str = POOLS,
               start: datetime | str = "2027-03-01T10:00:00+00:00") -> Iterator[PoolBench]:
    home = write_home(root, jobs, store_url=store_url, pools=pools)
    config = home.load_config()
    clock = FakeClock(start)
    store = home.open_store(config, clock=clock)
    apply_pools(store, config)
    executor = Executor(store, config)
    try:
        yield PoolBench(home, config, store, executor, clock)
    finally:
        executor.close()
        store.close()


def python_job(name: str, function: str, requires: str, kwargs: str = "{}",
               retry: str = "attempts = 2\nbase_seconds = 0\njitter = 0") -> str:
    return (f"[jobs.{name}]\nrequires = {{ {requires} }}\n[jobs.{name}.retry]\n{retry}\n"
            f'[[jobs.{name}.steps]]\nname = "call"\ntype = "python"\n'
            f'callable = "cz_pool_tasks:{function}"\nisolation = "thread"\n'
            f"op_kwargs = {kwargs}\n")
