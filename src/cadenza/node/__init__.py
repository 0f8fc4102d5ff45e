"""One ``cadenza serve`` process but its HTTP server: a composition of services.

::

    scheduler ──creates runs──▶ store ◀──claims── dispatcher ──Started──▶ workers
    (leader only)                 ▲                (admission)
                 reaper ──re-queues expired leases┘    lease keeper ──renews── its runs

A :class:`Node` builds its **parts** (the group commit, the lease keeper, the claimer
process, the executors of the current configuration, the scheduler's leadership) and a list
of **services** (:mod:`cadenza.lifecycle`) that share one start/stop protocol:

============  ===========================================================================
keeper        :class:`~cadenza.executor.lease_keeper.LeaseKeeper`: renews the leases of the runs
              this process executes (one UPDATE per round, every lease/3), stops a run
              whose cancel was requested or whose lease was lost
claimer       the claimer process (:mod:`cadenza.executor.claimer`), if the node has one
reaper        :class:`~cadenza.node.reaper.Reaper`: at start takes back what a crash of this
              host left, then re-queues expired leases of any node every lease/3 (not
              while the node's clock is off the store's time); watches SQLite's WAL
local-disk    :class:`~cadenza.node.local_disk.LocalDisk`: probes the home's ``data/``
              every 2 s; while it cannot be written the node is degraded and claims no
              new runs
scheduler     :class:`~cadenza.node.scheduling.SchedulerService`: settles the fires a
              stopped server recorded ahead, then records fires (leader only)
retention     :class:`~cadenza.retention.RetentionSweeper`: the daily prune (leader only)
health        :class:`~cadenza.resources.health.HealthChecker`: route health checks (every
              node on SQLite, the leader on PostgreSQL)
cooldowns     :class:`~cadenza.resources.cooldowns.CooldownEnds`: a cooldown ends at its
              time (a unit back AVAILABLE, a route probed once more), where health runs
roster        :class:`~cadenza.node.roster.RosterService` (PostgreSQL): this node's row in
              the ``nodes`` table every 10 s, and the workers of every live node (read
              at most every second while the dispatcher decides), which bound this
              node's share of the cluster cap's room for runs claimed ahead
config        :class:`~cadenza.node.config.ConfigHolder`: the current configuration, its
              reload, the watch of ``cadenza.toml`` and ``jobs.toml``
dispatcher    :class:`~cadenza.node.dispatcher.Dispatcher`: admission, claims, staged due
              times, and the workers
============  ===========================================================================

:meth:`Node.start` starts the services in this order on one
:class:`~contextlib.ExitStack`; :meth:`Node.stop` signals every loop (the
:class:`~cadenza.lifecycle.Lifecycle`'s stop event) and closes the stack, so services stop
in reverse: the dispatcher first, then the workers drain, then the group commit writes what
they queued; then the other loops; then the parts the node built, in reverse of their
building: group commit, lease keeper, claimer process, executors, leadership. Running runs
finish (up to the stop's timeout); when the process is killed they stay RUNNING with a lease
that a later start reclaims.

**Adding a service** (a health checker, a notification sender) is one entry in the list
that :meth:`Node._compose` returns, or, from outside, ``node.services.insert(-1, service)``
before :meth:`Node.start` (before the dispatcher: it then stops after it). The service is
any object with a ``name`` and ``start(stack)`` that starts its thread with
``life.spawn(stack, ...)`` and paces it with ``life.pause(seconds)``::

    class HealthChecker:
        name = "health"

        def __init__(self, store: Store, life: Lifecycle) -> None:
            self.store, self.life = store, life

        def start(self, stack: ExitStack) -> None:
            self.life.spawn(stack, self._loop, "cadenza-health")

        def _loop(self) -> None:
            while not self.life.pause(CHECK_SECONDS):
                ...  # one round of checks

Time: every loop waits through the node's :class:`~cadenza.clock.Clock` (``clock.wait``),
so that under a :class:`~cadenza.clock.FakeClock` a test drives the whole node by moving the
clock. Windows: threads only; the CLI installs SIGINT/SIGTERM (and SIGHUP where it exists).
"""

from __future__ import annotations

import threading
from contextlib import ExitStack

from cadenza.clock import Clock
from cadenza.config.loader import LoadedConfig
from cadenza.executor.claimer import Claimer, claimer_for
from cadenza.executor.group_commit import GroupCommit
from cadenza.executor.lease_keeper import LeaseKeeper
from cadenza.executor.runner import Executor, default_owner
from cadenza.home import Home
from cadenza.lifecycle import Begin, Lifecycle, Loop, Service
from cadenza.node.config import ConfigHolder
from cadenza.node.dispatcher import Dispatcher
from cadenza.node.local_disk import LocalDisk
from cadenza.node.reaper import Reaper
from cadenza.node.roster import RosterService
from cadenza.node.scheduling import SchedulerService
from cadenza.resources.cooldowns import CooldownEnds
from cadenza.resources.health import HealthChecker
from cadenza.resources.pools import apply_pools
from cadenza.retention import RetentionSweeper
from cadenza.scheduler.leader import Leadership, leadership_for
from cadenza.scheduler.service import LOOKAHEAD, Scheduler
from cadenza.services.health import NodeStatus
from cadenza.store import Store

__all__ = ["Node"]


class Node:
    """Everything of one server process but the HTTP server (see the module doc)."""

    def __init__(self, home: Home, config: LoadedConfig, store: Store, *, clock: Clock,
                 workers: int | None = None, scheduler: bool = True,
                 owner: str | None = None, claimer: bool | None = None) -> None:
        """``workers``: concurrent runs (default ``[workers] count``); ``scheduler``: fire
        schedules (False: only run queued runs); ``claimer``: have a claimer process (None:
        when it pays, see :mod:`cadenza.executor.claimer`). Builds the parts; starts
        nothing."""
        self.home = home
        self.store = store
        self.clock = clock
        self.owner = owner or default_owner()
        self.workers = workers or config.settings.workers.count
        self.life = Lifecycle(clock)
        # The parts, closed by stop() after every service, in reverse of this order.
        self._stack = ExitStack()
        self.leader: Leadership | None = None
        if scheduler:
            self.leader = leadership_for(store.engine,
                                         lease=config.settings.server.leader_lease)
            self._stack.callback(self.leader.close)
        self.keeper = LeaseKeeper(store, lambda: self.config.settings.workers.lease,
                                  clock=clock)
        """One heartbeat for the leases of every run this process executes."""
        self.recorder = GroupCommit(store)
        """One group commit for the node's workers (its end hook is the dispatcher's)."""
        self.holder = ConfigHolder(home, store, config, self.life, self._executor)
        self._stack.callback(self.holder.close)
        self.claimer: Claimer | None = claimer_for(store, config, self.workers, claimer)
        if self.claimer is not None:
            self._stack.callback(self.claimer.close)
        self._stack.callback(self.keeper.stop)
        self._stack.callback(self.recorder.close)  # its own connection (PostgreSQL)
        self._stack.callback(self.recorder.flush)
        self.scheduler: Scheduler | None = None
        if self.leader is not None:
            # A node whose clock is off neither leads nor reaps (the reaper checks it).
            self.scheduler = Scheduler(store, config, clock=clock, leader=self.leader,
                                       lookahead=LOOKAHEAD,
                                       may_lead=lambda: not self.reaper.clock_off)
            self.holder.on_reload(self.scheduler.reload)
        # Several nodes share the cluster cap on PostgreSQL: each says how many workers it
        # has, so that none fills the cap with runs claimed ahead while another's workers
        # are idle (SQLite: one node per store).
        self.roster: RosterService | None = (
            RosterService(store, self.owner, self.workers, self.life)
            if store.dialect == "postgresql" else None)
        self.disk = LocalDisk(home.data_dir, self.life,
                              busy=lambda: self.dispatcher.holds_runs())
        """Whether the home's ``data/`` takes writes (the node claims nothing while not)."""
        self.dispatcher = Dispatcher(store, self.holder, self.recorder, self.life,
                                     workers=self.workers, claimer=self.claimer,
                                     held_back=lambda: self.disk.current() is not None,
                                     cluster_workers=self._cluster_workers)
        # Whoever waits on the local queue (workers a test started by hand, too) is released
        # when the node closes; a started node's dispatcher service did it already.
        self._stack.callback(self.dispatcher.close)
        self.reaper = Reaper(store, self.owner, self.life,
                             lambda: self.config.settings.workers.lease,
                             on_reaped=self.dispatcher.wake,
                             max_skew=lambda: self.config.settings.workers.max_clock_skew)
        self.retention: RetentionSweeper | None = None
        self.services: list[Service] = self._compose()
        """Started in this order by :meth:`start`, stopped in reverse by :meth:`stop`."""
        self._started = False

    def _compose(self) -> list[Service]:
        services: list[Service] = [Begin("keeper", self.keeper.start)]
        if self.claimer is not None:
            services.append(Begin("claimer", self.claimer.start))
        services.append(self.reaper)
        services.append(self.disk)
        if self.scheduler is not None:
            services.append(SchedulerService(self.scheduler, self.life,
                                             on_queued=self.dispatcher.wake))
            # The daily prune, on the scheduler's leader only.
            sweeper = RetentionSweeper(self.store, lambda: self.config.settings.retention,
                                       self.clock, leader=self.leader)
            self.retention = sweeper
            services.append(Loop("retention", self.life,
                                 lambda: sweeper.run_forever(self.life.stopping)))
        # The notification sender: its hooks write the outbox rows in the run ends' and the
        # MISSED fires' transactions; its loop delivers them (cadenza.notify.sender).
        from cadenza.notify.sender import Sender

        self.sender = Sender(self.store, lambda: self.config, self.life, owner=self.owner)
        self.sender.install()
        self.dispatcher.on_store_change.append(self.sender.nudge)
        services.append(self.sender)
        # Route health checks (docs/health-checks.md): the leader only on PostgreSQL, see its
        # leads().
        self.health = HealthChecker(self.store, self.life, lambda: self.config.settings,
                                    leader=self.leader)
        services.append(self.health)
        # Cooldowns end at their time (docs/pools.md): units come back, routes are probed.
        self.cooldowns = CooldownEnds(self.store, self.life, lambda: self.config.settings,
                                      self.health)
        services.append(self.cooldowns)
        if self.roster is not None:
            services.append(self.roster)
        services += [self.holder, self.dispatcher]
        return services

    def _cluster_workers(self) -> int:
        """The workers of every live node serving the store, this one's included."""
        return self.roster.workers_now() if self.roster is not None else self.workers

    def _executor(self, config: LoadedConfig) -> Executor:
        """The executor of ``config`` (at the start and at each valid reload), the store's
        pools made ``config``'s first."""
        apply_pools(self.store, config)
        return Executor(self.store, config, owner=self.owner, recorder=self.recorder,
                        keeper=self.keeper)

    @property
    def config(self) -> LoadedConfig:
        """The configuration applied now (a reload replaces it)."""
        return self.holder.config

    @property
    def stop_event(self) -> threading.Event:
        """Set by :meth:`stop`; a signal handler may set it to ask for a stop."""
        return self.life.stopping

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the services in order; returns at once."""
        if self._started:
            raise RuntimeError("a node starts once")
        self._started = True
        for service in self.services:
            service.start(self._stack)

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming, let running runs finish (up to ``timeout`` per thread), then close
        the services in reverse and the parts (see the module doc). Also closes the parts of
        a node that was never started."""
        self.life.stop(timeout)
        self._stack.close()

    # -- what the services do, from outside -------------------------------------------------

    def status(self) -> NodeStatus:
        """What this node says of itself in ``/api/health`` and ``/metrics``: whether it
        leads the scheduler, its clock's skew from the store's time at the reaper's last
        look, and why it is degraded: its clock is off on a shared store (it neither leads
        nor reaps; :attr:`Reaper.shared`), or its home's ``data/`` cannot be written (it
        claims no new runs; :class:`~cadenza.node.local_disk.LocalDisk`)."""
        skew = self.reaper.skew
        reasons = []
        if self.reaper.clock_off:
            reasons.append(f"clock skew: {self.reaper.refused}")
        disk = self.disk.current()
        if disk is not None:
            reasons.append(disk.reason)
        return NodeStatus(
            leader=self.leader.is_leader if self.leader is not None else None,
            # "+ 0.0": a skew that rounds to zero reads 0.0, not -0.0
            clock_skew_seconds=round(skew.total_seconds(), 3) + 0.0 if skew is not None
            else None,
            degraded="; ".join(reasons) or None)

    def reload(self) -> bool:
        """Load both files again and apply them if valid (:meth:`ConfigHolder.reload`)."""
        return self.holder.reload()

    def request_reload(self) -> None:
        """Reload both files at the dispatcher's next occasion (SIGHUP)."""
        self.holder.request_reload()

