"""The scheduler service: turns due fires into runs, durably, once (docs/scheduling.md).

::

    scheduler = Scheduler(store, loaded_config, clock=SystemClock())
    stop = threading.Event()
    threading.Thread(target=scheduler.run_forever, args=(stop,), daemon=True).start()
    ...
    scheduler.reload(new_config)      # after a valid config change
    stop.set()                        # run_forever returns promptly

A tick, for every enabled schedule whose next fire is due: lock its cursor, take the fires in
``(cursor, now]``, decide each one (:func:`~cadenza.scheduler.fires.plan_job`: on time,
missed, caught up, overlap), write the runs and move the cursor to the last fire **in one
transaction**. A crash before the commit leaves neither; a crash after it leaves both. Two
schedulers racing for the same fire insert one row (UNIQUE job, schedule, scheduled_for) and
the loser's insert is a no-op; on PostgreSQL the cursor row lock (``FOR UPDATE``) makes the
second scheduler wait and then see the advanced cursor.

Each transaction (the due schedules of up to :data:`RUNS_PER_TRANSACTION` fires) writes with
a fixed number of statements: the runs and their RUN_CREATED / RUN_MISSED events through
:meth:`~cadenza.store.fires.FiresRepository.create_fires` (``INSERT ... ON CONFLICT DO
NOTHING RETURNING id``: events only for the rows inserted), the cursors with one
:meth:`~cadenza.store.cursors.CursorsRepository.advance_cursors`. The fires of each schedule
come from a :class:`~cadenza.scheduler.fires.FireStream` kept between ticks.

Cursors (``schedule_cursors``): a schedule seen for the first time starts at ``now`` (no
backfill). At start-up and on reload a disabled, removed, changed (expression or zone) or
newly enabled schedule's cursor moves to ``now``: nothing is owed for a time it was off, and a
new expression never backfills. A clock stepping back never re-fires (cursors only move
forward); a step forward is downtime (the skipped fires are missed).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from cadenza.clock import Clock
from cadenza.domain.errors import LeadershipLost, StoreError
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.scheduler.fires import (
    CreatedRun,
    DueFires,
    FireStream,
    PlannedRun,
    TickResult,
    jobs_of,
    log_result,
    plan_job,
)
from cadenza.scheduler.leader import Leadership
from cadenza.scheduler.schedules import (
    JobPolicy,
    ScheduleSpec,
    all_schedules,
    calendars_of,
    policy_of,
    server_zone,
)
from cadenza.store.desktop import Pause, SchedulingPauses
from cadenza.store.fires import NewFire
from cadenza.store.protocols import SchedulerStore

log = logging.getLogger(__name__)

Key = tuple[str, str]
RUNS_PER_TRANSACTION = 500
"""Runs written per transaction: a tick's due jobs are grouped up to this many fires; a long
backlog (days of downtime of a frequent job) is written in chunks of this size."""
LOOKAHEAD = timedelta(seconds=3)
"""How long before a fire ``cadenza serve`` records its run (QUEUED, ``not_before`` = the
scheduled time, plus jitter): at the due time only the claim remains (see the module doc).
The node stages the runs in what is left of it (executor/staging.py): recording 10,000
fires takes about 0.9 s and staging them about 1.1 s, which 2 s did not hold."""
MAX_SLEEP = 60.0
"""Longest sleep of :meth:`Scheduler.run_forever`, so a wall clock step is noticed."""
LEADER_RETRY = 15.0
"""Seconds between attempts to become the leader."""
MAX_BACKOFF = 60.0


class Scheduler:
    """Creates the runs of due fires; embeddable (see the module doc). Thread-safe."""

    def __init__(
        self,
        store: SchedulerStore,
        config: Any,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        leader: Leadership | None = None,
        default_zone: ZoneInfo | None = None,
        actor: str = "scheduler",
        lookahead: timedelta = timedelta(0),
        may_lead: Callable[[], bool] = lambda: True,
    ) -> None:
        """``config``: a ``LoadedConfig`` (or a mapping of job id to ``JobConfig``).
        ``rng`` draws the jitter (inject a seeded one in tests); ``leader`` gates
        :meth:`run_forever` only (None: always lead); ``default_zone`` is the zone of jobs
        without ``timezone`` (default: :func:`server_zone`); ``lookahead`` records fires that
        far ahead (``cadenza serve``: :data:`LOOKAHEAD`; 0: at their due time);
        ``may_lead``: whether this node may lead now (False while its clock differs from
        the store's: it neither takes nor keeps the leadership)."""
        if lookahead < timedelta(0):
            raise ValueError("lookahead cannot be negative")
        self.store = store
        self.lookahead = lookahead
        self.clock = clock or store.clock
        self.rng = rng or random.Random()
        self.leader = leader
        self.may_lead = may_lead
        self.zone = default_zone or server_zone()
        self.actor = actor
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._specs: dict[Key, ScheduleSpec] = {}
        self._policies: dict[str, JobPolicy] = {}
        self._cursors: dict[Key, datetime] = {}
        self._next: dict[Key, datetime | None] = {}
        self._moves: dict[Key, datetime] = {}
        self._streams: dict[Key, FireStream] = {}
        self._held: dict[Key, datetime] = {}  # fires left for their due time (overlap)
        self._loaded = False
        self._apply(config)

    # -- public API ---------------------------------------------------------------------

    @property
    def schedules(self) -> list[ScheduleSpec]:
        """Every schedule of the current config (enabled or not)."""
        with self._lock:
            return list(self._specs.values())

    def tick(self, now: datetime) -> TickResult:
        """Record every fire due at ``now`` (see the module doc); raises StoreError when the
        store fails (nothing of the failed transaction is kept; the next tick retries)."""
        if now.tzinfo is None:
            raise ValueError("tick() needs an aware datetime")
        with self._lock:
            return self._tick(now.astimezone(UTC))

    def next_wakeup(self, now: datetime) -> datetime | None:
        """When the next tick has work: the earliest next fire of an enabled schedule, ``now``
        when cursors must be read or moved first, None when nothing is scheduled."""
        with self._lock:
            if not self._loaded or self._moves:
                return now.astimezone(UTC)
            due = [self._record_at(key, when) for key, when in self._next.items()
                   if when is not None]
            return min(due) if due else None

    def _record_at(self, key: Key, when: datetime) -> datetime:
        """When the fire ``when`` of ``key`` is recorded: ``lookahead`` before it, or at it
        when the look-ahead left it for its due time."""
        return when if self._held.get(key) == when else when - self.lookahead

    def reload(self, config: Any, now: datetime | None = None) -> None:
        """Switch to a new valid configuration.

        First records what the old configuration owes up to ``now``, then moves the cursors
        of changed, added, re-enabled, disabled and removed schedules to ``now`` (a removed
        schedule's cursor row is kept), and wakes :meth:`run_forever`.
        """
        with self._lock:
            at = (now or self.clock.now()).astimezone(UTC)
            # A follower writes nothing: the leader records what is owed, and this node
            # reads the cursors again when it takes the leadership.
            leading = self.leader is None or self.leader.is_leader
            if self._loaded and leading:
                try:
                    self._tick(at, ahead=False)
                except (StoreError, sa.exc.SQLAlchemyError):
                    log.exception("could not record the fires due before the reload")
            before = {key: (s.enabled, s.identity) for key, s in self._specs.items()}
            self._apply(config)
            after = {key: (s.enabled, s.identity) for key, s in self._specs.items()}
            changed = set()
            for key in before.keys() | after.keys():
                if before.get(key) != after.get(key):
                    self._moves[key] = at
                    changed.add(key)
            if self._loaded and leading and self.lookahead > timedelta(0):
                try:
                    self._withdraw(changed, before, after, at)
                except (StoreError, sa.exc.SQLAlchemyError):
                    log.exception("could not withdraw the fires recorded ahead")
            if self._loaded and leading:
                try:
                    self._flush_moves()
                except (StoreError, sa.exc.SQLAlchemyError):
                    log.exception("could not move schedule cursors; retrying on the next tick")
        self.wake()

    def _withdraw(self, keys: set[Key], before: Mapping[Key, Any], after: Mapping[Key, Any],
                  at: datetime) -> None:
        """Cancel the runs recorded ahead (not due at ``at``) of schedules a reload removed,
        disabled or changed: the configuration that recorded them no longer has that fire."""
        if not keys:
            return
        with self.store.write() as conn:
            self._fence(conn)
            for run_id, job_id, name, when in self.store.fires_ahead(keys, at, conn=conn):
                now = after.get((job_id, name))
                why = ("removed" if now is None else "disabled" if not now[0]
                       else "changed" if before.get((job_id, name)) else "re-enabled")
                self.store.transition_run(
                    run_id, RunState.CANCELED, actor=self.actor, conn=conn,
                    reason=(f"withdrawn before its fire at {when.isoformat()}: schedule "
                            f"{name} of {job_id} was {why} by a configuration reload"))

    def wake(self) -> None:
        """Interrupt :meth:`run_forever`'s sleep (it recomputes when to wake)."""
        self._wake.set()

    def try_lead(self) -> bool:
        """Take or keep the leadership when this node may lead (one attempt); give it up
        when it may not (its clock is off). True while it leads; always without a leader."""
        if self.leader is None:
            return True
        if not self.may_lead():
            if self.leader.is_leader:
                log.warning("scheduler leadership given up: this node's clock differs from "
                            "the store's time")
                self.leader.release()
            return False
        return self.leader.acquire()

    def _took_over(self) -> None:
        """An audit event when this node takes a term of a leadership that has terms (a
        lease in a shared database): who fires schedules, from when."""
        epoch = self.leader.epoch if self.leader is not None else None
        if epoch is None:
            return
        try:
            self.store.append_event(
                EventType.LEADERSHIP, f"{self.leader_name()} leads the scheduler (term {epoch})",
                level=Level.INFO, actor=self.actor,
                payload={"holder": self.leader_name(), "term": epoch, "leading": True})
        except (StoreError, sa.exc.SQLAlchemyError):
            log.exception("could not record the scheduler's new leadership")

    def _refused(self, exc: LeadershipLost) -> None:
        """An audit event for a write refused by the fence (a former leader's late write)."""
        try:
            self.store.append_event(
                EventType.LEADERSHIP, f"a write of {self.leader_name()} as the scheduler's "
                f"former leader was refused: {exc}", level=Level.WARNING, actor=self.actor,
                payload={"holder": self.leader_name(), "leading": False})
        except (StoreError, sa.exc.SQLAlchemyError):
            log.exception("could not record the refused write")

    def leader_name(self) -> str:
        """Who this node is as a leader (its lease's holder), or "this node"."""
        return (self.leader.holder if self.leader is not None else None) or "this node"

    def _fence(self, conn: sa.Connection) -> None:
        """A write as leader, in ``conn``'s transaction: refused once the term has ended
        (:meth:`~cadenza.scheduler.leader.Leadership.fence`)."""
        if self.leader is not None:
            self.leader.fence(conn)

    def invalidate(self) -> None:
        """Forget the cursors held in memory; the next tick reads them again."""
        with self._lock:
            self._loaded = False
        self.wake()

    def run_forever(
        self,
        stop_event: threading.Event,
        clock: Clock | None = None,
        *,
        wait: Callable[[float], object] | None = None,
        on_tick: Callable[[TickResult], object] | None = None,
    ) -> None:
        """Tick whenever a fire is due, until ``stop_event`` is set.

        ``on_tick`` is called after each successful tick (``cadenza serve`` wakes its
        dispatcher with it, so that new runs start without waiting for a poll).

        Sleeps until the next due fire (at most :data:`MAX_SLEEP` seconds, so a step of the
        wall clock is noticed), a :meth:`reload`/:meth:`wake`, or ``stop_event``; never
        polls. Ticks only while ``leader`` (if any) grants leadership. A failed tick (store
        unavailable, or anything else) is logged and retried with a growing pause (up to a
        minute); the loop itself never dies of it. Waits go through ``clock.wait`` (a
        ``FakeClock`` drives the loop); ``wait`` replaces them (a test may pass one that
        advances a ``FakeClock``).
        """
        clock = clock or self.clock

        def pause(seconds: float) -> object:
            return clock.wait(self._wake, seconds)

        sleep = wait or pause

        def forward_stop() -> None:
            stop_event.wait()
            self._wake.set()

        watcher = threading.Thread(target=forward_stop, name="cadenza-scheduler-stop", daemon=True)
        watcher.start()
        backoff = 1.0
        leading = self.leader is None
        try:
            while not stop_event.is_set():
                self._wake.clear()
                if self.leader is not None:
                    now_leading = self.try_lead()
                    if now_leading and not leading:
                        self.invalidate()
                        self._wake.clear()
                        self._took_over()
                    leading = now_leading
                    if not leading:
                        sleep(self.leader.renew_every or LEADER_RETRY)
                        continue
                try:
                    result = self.tick(clock.now())
                except LeadershipLost as exc:
                    # A former leader's late write (it was stopped, slow or cut off past its
                    # lease): refused in the database, nothing of it kept.
                    log.warning("scheduler write refused, this node no longer leads: %s", exc)
                    self._refused(exc)
                    leading = False
                    if self.leader is not None:
                        sleep(self.leader.renew_every or LEADER_RETRY)
                    continue
                except (StoreError, sa.exc.SQLAlchemyError) as exc:
                    log.warning("scheduler tick failed (retrying in %.0fs): %s", backoff, exc)
                    sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                except Exception:
                    # The loop outlives any one failure: a bug must not stop every schedule.
                    log.exception("scheduler tick failed (retrying in %.0fs)", backoff)
                    sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                backoff = 1.0
                if on_tick is not None:
                    on_tick(result)  # first: the dispatcher need not wait for the log lines
                log_result(result)
                if stop_event.is_set():
                    break
                now = clock.now()
                wake_at = self.next_wakeup(now)
                timeout = MAX_SLEEP
                if wake_at is not None:
                    timeout = min(max((wake_at - now).total_seconds(), 0.0), MAX_SLEEP)
                if self.leader is not None and self.leader.renew_every is not None:
                    timeout = min(timeout, self.leader.renew_every)  # renew the lease in time
                sleep(timeout)
        finally:
            if self.leader is not None:
                self.leader.release()

    # -- internals ----------------------------------------------------------------------

    def _apply(self, config: Any) -> None:
        jobs = jobs_of(config)
        self._specs = all_schedules(dict(jobs), self.zone, calendars_of(config))
        self._policies = {job_id: policy_of(job) for job_id, job in jobs.items()}
        enabled = {key for key, spec in self._specs.items() if spec.enabled}
        self._cursors = {k: v for k, v in self._cursors.items() if k in enabled}
        self._next = {k: v for k, v in self._next.items() if k in enabled}
        self._streams = {
            k: stream for k, stream in self._streams.items()
            if k in enabled and stream.spec.identity == self._specs[k].identity
        }
        if enabled - self._next.keys():
            self._loaded = False  # a new schedule: read (or create) its cursor first

    def _enabled(self) -> dict[Key, ScheduleSpec]:
        return {key: spec for key, spec in self._specs.items() if spec.enabled}

    def _remember(self, key: Key, cursor: datetime) -> None:
        spec = self._specs.get(key)
        if spec is None or not spec.enabled:
            return
        known = self._cursors.get(key)
        if known is not None and known > cursor:
            cursor = known
        self._cursors[key] = cursor
        held = self._held.get(key)
        if held is not None and held <= cursor:
            del self._held[key]
        stream = self._stream(key, cursor)
        self._next[key] = stream.first_after(cursor)
        stream.forget(cursor)

    def _stream(self, key: Key, after: datetime) -> FireStream:
        """The fires of the schedule ``key``, kept between ticks; a new one starts after
        ``after`` (a stream answers for any instant, restarting when asked about an earlier
        one than it holds)."""
        spec = self._specs[key]
        stream = self._streams.get(key)
        if stream is None or stream.spec.identity != spec.identity:
            stream = self._streams[key] = FireStream(spec, after)
        return stream

    def _load(self, now: datetime) -> None:
        """Read every cursor; create missing ones and move off-schedule ones to ``now``."""
        enabled = self._enabled()
        existing = self.store.get_cursors()
        targets = dict(self._moves)
        for key in self._specs.keys() | existing.keys():
            if key not in enabled:
                targets[key] = now  # nothing is owed for a time it was off or gone
            elif existing.get(key) is None:
                targets.setdefault(key, now)  # new: from its reload, else from now
        if targets:
            with self.store.write() as conn:
                self._fence(conn)
                self.store.advance_cursors(targets, conn=conn)
        self._moves.clear()
        cursors = self.store.get_cursors(enabled)
        self._cursors.clear()
        self._next.clear()
        for key in enabled:
            self._remember(key, cursors.get(key) or now)
        self._loaded = True

    def settle_stale(self, now: datetime) -> int:
        """At start, before anything is claimed (``cadenza serve`` calls it): fires recorded
        ahead by a previous process that stopped before their time, whose run did not start
        within ``missed_grace``, are settled by the job's ``on_missed`` as if they had not
        been recorded ahead: ``skip`` cancels them ("missed: ..."); ``run_latest`` keeps one
        only when no later fire of its schedule is owed by now (else that later one runs);
        ``run_all`` keeps them. Those of a removed or disabled schedule are canceled. The run
        row stays: each fire is still exactly one row. Returns how many were canceled."""
        with self._lock:
            return self._settle_stale(now.astimezone(UTC))

    def _settle_stale(self, now: datetime) -> int:
        stale = self.store.stale_fires_ahead(now)
        if not stale:
            return 0
        cancel: list[tuple[str, str]] = []
        for run_id, job_id, name, when in stale:
            policy = self._policies.get(job_id)
            spec = self._specs.get((job_id, name))
            if policy is None or spec is None or not spec.enabled:
                cancel.append((run_id, f"missed: its schedule {name} is gone or disabled"))
                continue
            if when + policy.missed_grace >= now:
                continue  # still within its grace: it runs, late but on time by the rules
            later = FireStream(spec, when).first_after(when)
            if policy.on_missed == "run_all" or (
                    policy.on_missed == "run_latest" and (later is None or later > now)):
                continue
            cancel.append((run_id, f"missed: not started within missed_grace of its fire at "
                                   f"{when.isoformat()} (no server was running; on_missed = "
                                   f"{policy.on_missed})"))
        if not cancel:
            return 0
        done = 0
        with self.store.write() as conn:
            self._fence(conn)
            for run_id, reason in cancel:
                done += self.store.transition_run(run_id, RunState.CANCELED, actor=self.actor,
                                                  conn=conn, reason=reason)
        log.warning("settled %d fire(s) recorded ahead by a stopped server as missed", done)
        return done

    def _flush_moves(self) -> None:
        if not self._moves:
            return
        moves = dict(self._moves)
        with self.store.write() as conn:
            self._fence(conn)
            self.store.advance_cursors(moves, conn=conn)
        self._moves.clear()
        cursors = self.store.get_cursors(moves)
        for key, when in moves.items():
            self._remember(key, cursors.get(key) or when)

    def _tick(self, now: datetime, *, ahead: bool = True) -> TickResult:
        if not self._loaded:
            self._load(now)
        self._flush_moves()
        horizon = now + self.lookahead if ahead else now
        due = sorted(
            (when, key) for key, when in self._next.items()
            if when is not None and (when <= now or (
                when <= horizon and self._record_at(key, when) <= now))
        )
        created: list[CreatedRun] = []
        duplicates = 0
        batch: dict[str, list[Key]] = {}
        size = 0
        for _when, key in due:
            batch.setdefault(key[0], []).append(key)
            size += 1
            if size >= RUNS_PER_TRANSACTION:
                duplicates += self._fire(batch, now, created, horizon)
                batch, size = {}, 0
        if batch:
            duplicates += self._fire(batch, now, created, horizon)
        return TickResult(now, tuple(created), duplicates, self.next_wakeup(now))

    def _ahead(self, plan: list[PlannedRun], now: datetime) -> list[PlannedRun]:
        """The look-ahead rule over one job's plan: a fire after ``now`` is recorded QUEUED
        with ``not_before`` = its time (or its jitter's); one that the overlap rule would skip
        is left, with the later fires of its schedule, for its due time (:attr:`_held`)."""
        out: list[PlannedRun] = []
        held: set[str] = set()
        for run in plan:
            if run.scheduled_for <= now:
                out.append(run)
                continue
            name = run.schedule.name
            if name in held:
                continue
            if run.state is not RunState.QUEUED:
                held.add(name)
                self._held[run.schedule.key] = run.scheduled_for
                continue
            out.append(replace(run, not_before=run.not_before or run.scheduled_for))
        return out

    def _paused(self, plan: list[PlannedRun], now: datetime, pause: Pause) -> list[PlannedRun]:
        """Scheduling is paused: each due fire is recorded MISSED with who paused it (quiet:
        no missed alert); later fires are left for their due time (:attr:`_held`), when the
        pause is looked at again."""
        reason = (f"scheduling paused by {pause.by} "
                  f"(since {pause.since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)")
        out: list[PlannedRun] = []
        held: set[str] = set()
        for run in plan:
            if run.scheduled_for > now:
                if run.schedule.name not in held:
                    held.add(run.schedule.name)
                    self._held[run.schedule.key] = run.scheduled_for
                continue
            if run.state is RunState.QUEUED:
                run = replace(run, state=RunState.MISSED, reason=reason, quiet=True,
                              not_before=None)
            out.append(run)
        return out

    def _fire(self, batch: Mapping[str, list[Key]], now: datetime, out: list[CreatedRun],
              horizon: datetime | None = None) -> int:
        """One transaction for the due schedules of ``batch``; long backlogs continue in
        further transactions. Returns the number of fires that were already recorded."""
        keys = [key for keys in batch.values() for key in keys]
        leftovers: list[tuple[str, list[PlannedRun]]] = []
        todo: list[tuple[str, PlannedRun]] = []
        with self.store.write() as conn:
            self._fence(conn)
            locked = self.store.lock_cursors(keys, conn=conn)
            missing = [key for key in keys if locked.get(key) is None]
            if missing:
                self.store.init_cursors(missing, now, conn=conn)
            active = self.store.count_active_runs(batch, conn=conn)
            pause = SchedulingPauses(self.store).current(conn)
            moved: dict[Key, datetime] = {key: locked.get(key) or now for key in keys}
            for job_id, job_keys in batch.items():
                dues = [
                    DueFires(
                        self._specs[key],
                        self._stream(key, moved[key]).between(moved[key], horizon or now),
                    )
                    for key in job_keys
                ]
                plan = plan_job(self._policies[job_id], dues, now, active.get(job_id, 0), self.rng)
                if pause is not None:
                    plan = self._paused(plan, now, pause)
                elif horizon is not None and horizon > now:
                    plan = self._ahead(plan, now)
                head, tail = plan[:RUNS_PER_TRANSACTION], plan[RUNS_PER_TRANSACTION:]
                todo.extend((job_id, run) for run in head)
                if tail:
                    leftovers.append((job_id, tail))
            duplicates = self._write(conn, todo, moved, out)
            self.store.advance_cursors(moved, create=False, conn=conn)
        for key, cursor in moved.items():
            self._remember(key, cursor)
        for job_id, tail in leftovers:
            duplicates += self._write_backlog(job_id, tail, out)
        return duplicates

    def _write_backlog(self, job_id: str, plan: list[PlannedRun], out: list[CreatedRun]) -> int:
        duplicates = 0
        for start in range(0, len(plan), RUNS_PER_TRANSACTION):
            chunk = plan[start : start + RUNS_PER_TRANSACTION]
            keys = {(job_id, run.schedule.name) for run in chunk}
            with self.store.write() as conn:
                self._fence(conn)
                locked = self.store.lock_cursors(keys, conn=conn)
                moved = {key: locked.get(key) or chunk[0].scheduled_for for key in keys}
                todo = [r for r in chunk if r.scheduled_for > moved[(job_id, r.schedule.name)]]
                duplicates += len(chunk) - len(todo)
                duplicates += self._write(conn, [(job_id, run) for run in todo], moved, out)
                self.store.advance_cursors(moved, create=False, conn=conn)
            for key, cursor in moved.items():
                self._remember(key, cursor)
        return duplicates

    def _write(
        self,
        conn: sa.Connection,
        plan: Sequence[tuple[str, PlannedRun]],
        moved: dict[Key, datetime],
        out: list[CreatedRun],
    ) -> int:
        """Record the planned runs (job id, run) in the caller's transaction with one
        :meth:`~cadenza.store.fires.FiresRepository.create_fires` (QUEUED or MISSED rows, one
        RUN_CREATED / RUN_MISSED event per row inserted); ``moved`` gets each schedule's new
        cursor (the caller writes it in the same transaction) and ``out`` the runs created,
        in plan order. Returns the number of fires that were already recorded."""
        fires = [
            NewFire(
                job_id,
                run.schedule.name,
                run.scheduled_for,
                state=run.state,
                overrides=run.overrides,
                reason=run.reason,
                priority=self._policies[job_id].priority,
                not_before=run.not_before,
                quiet=run.quiet,
            )
            for job_id, run in plan
        ]
        run_ids = self.store.create_fires(fires, actor=self.actor, conn=conn)
        duplicates = 0
        for (job_id, run), run_id in zip(plan, run_ids, strict=True):
            name = run.schedule.name
            key = (job_id, name)
            moved[key] = max(moved[key], run.scheduled_for)
            if run_id is None:
                duplicates += 1
                continue
            out.append(
                CreatedRun(
                    run_id, job_id, name, run.scheduled_for, run.state, run.reason, run.not_before
                )
            )
        return duplicates
