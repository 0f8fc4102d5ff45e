"""One assembly of the store's hooks (cadenza.assembly): ``cadenza serve`` and ``cadenza run
--local`` (and the CLI's other commands) wire the same hooks, once, from one function."""

from __future__ import annotations

from pathlib import Path

from tests.integration.executor_home import make_home

from cadenza.assembly import assemble
from cadenza.clock import SystemClock
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.node import Node
from cadenza.services import Actor, Services

JOBS = """
[jobs.hello]
[[jobs.hello.steps]]
name = "say"
type = "python"
callable = "cz_exec_tasks:count"
isolation = "thread"
"""

WIRED = {
    "claim": ["cadenza.resources.leasing.PoolLeaser.__call__"],
    "step_lease": ["cadenza.resources.leasing.PoolLeaser.steps_changed"],
    "step_start": ["cadenza.resources.leasing.PoolLeaser.started"],
    "run_end": ["cadenza.resources.leasing.PoolLeaser.ended",
                "cadenza.notify.rules.Notifier.run_end_hook",
                "cadenza.store.children.ChildRunHook.__call__"],
    "missed": ["cadenza.notify.rules.Notifier.missed_hook"],
}


def test_serve_and_run_local_wire_the_same_hooks(tmp_path: Path) -> None:
    home = Home(make_home(tmp_path / "home", JOBS).resolve())
    # cadenza run --local: the services' store and an executor on it
    with Services.at(home.path, actor=Actor.user("alice"), clock=SystemClock()) as local:
        store = local.store()
        executor = Executor(store, local.config())
        run_local = store.hooks.names()
        executor.close()
    # cadenza serve: the services' store and a node (executors, sender, claimer) on it
    with Services.at(home.path, actor=Actor.user("alice"), clock=SystemClock()) as served:
        store = served.store()
        node = Node(served.home, served.config(), store, clock=served.clock, workers=2,
                    claimer=False)
        serve = store.hooks.names()
        hooks = store.hooks
        node.stop(timeout=5)
        assert store.hooks is hooks  # given once: a node's parts do not re-wire them
    assert run_local == serve == WIRED


def test_assembling_twice_gives_the_same_parts(tmp_path: Path) -> None:
    home = Home(make_home(tmp_path / "home", JOBS).resolve())
    with Services.at(home.path, actor=Actor.user("alice"), clock=SystemClock()) as services:
        store = services.store()
        first = assemble(store)
        hooks = store.hooks
        assert assemble(store) is first and store.hooks is hooks
        assert first.notifier.config is not None  # follows the services' configuration
