"""``cadenza simulate``: replay schedules and admission on a virtual clock.

Nothing is executed and nothing is written. The simulation starts from an empty system (no
run queued or running), fires every enabled schedule in ``[start, end)`` with the rules of
the real scheduler (``on_overlap``; DST as in :mod:`cadenza.domain.cron`), and admits queued
runs with the real admission rules (:func:`cadenza.domain.admission.admit`: priority, global
``max_concurrent_runs``, one node of ``[workers].count`` workers, job and tag
``max_concurrency``, budgets, windows, ``not_before``). Each simulated run lasts its job's
median duration from history (the last SUCCEEDED runs) or one minute without history.
Jitter is not drawn (a run may start up to ``jitter`` later than shown). Missed fires of
downtime cannot happen on a virtual clock.

Resource pools (``requires``): each pool has its configured members, all taken to be
healthy (AVAILABLE at the start; probes and faults are not simulated, nor routes bound to
units); a run holds what it needs from its start to its end, then each member cools down
for its pool's ``cooldown``. A run admitted whose members are all held or cooling down
waits, with a reason naming the pool ("waiting for 1 of pool egress: 2 leased by runs ...,
1 cooling down until 14:03:00 UTC"), like a real claim's.

Outcome of each fire: ``run`` (it starts at ``start``; ``wait_reason`` is the first reason it
waited for, if it did not start at once), ``missed`` (recorded MISSED because of
``on_overlap = "skip"``; the reason says so) or ``skipped`` (queued but it would not start:
every rule keeps holding it, or it would still wait :data:`HORIZON` after ``end``;
``wait_reason`` is the last reason).
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from cadenza.domain.admission import Candidate, Limits, Load, admit
from cadenza.domain.calendar import Calendar
from cadenza.domain.states import RunState
from cadenza.scheduler.fires import DueFires, PlannedRun, plan_job
from cadenza.scheduler.schedules import JobPolicy, ScheduleSpec, all_schedules, policy_of

DEFAULT_DURATION = timedelta(minutes=1)
HORIZON = timedelta(days=7)
"""How long after ``end`` queued runs may still start before they count as skipped."""
MAX_FIRES = 200_000
"""Refuse intervals with more fires than this (ask for a shorter interval)."""

Outcome = Literal["run", "missed", "skipped"]


class SimulationTooLarge(ValueError):
    """The interval holds more fires than :data:`MAX_FIRES`."""


@dataclass
class SimulatedFire:
    """One fire and what would become of it."""

    job: str
    schedule: str
    scheduled_for: datetime
    zone: ZoneInfo
    outcome: Outcome = "skipped"
    start: datetime | None = None
    wait_reason: str | None = None
    run_id: str = ""
    last_reason: str | None = field(default=None, repr=False)

    def as_json(self) -> dict[str, Any]:
        """``{"job", "schedule", "scheduled_for", "outcome", "start", "wait_reason"}``; times
        are ISO 8601 in the schedule's zone, with their offset."""
        return {
            "job": self.job,
            "schedule": self.schedule,
            "scheduled_for": self.scheduled_for.astimezone(self.zone).isoformat(),
            "outcome": self.outcome,
            "start": self.start.astimezone(self.zone).isoformat() if self.start else None,
            "wait_reason": self.wait_reason,
        }


@dataclass
class SimulatedPool:
    """A pool in a simulation: its members' count and cooldown."""

    size: int
    cooldown: timedelta


@dataclass
class _Member:
    holder: str | None = None
    held_until: datetime | None = None
    cooldown_until: datetime | None = None


@dataclass
class _State:
    limits: Limits
    workers: int
    durations: Mapping[str, timedelta]
    needs: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    pools: dict[str, tuple[SimulatedPool, list[_Member]]] = field(default_factory=dict)
    load: Load = field(default_factory=Load)
    queued: dict[str, tuple[Candidate, SimulatedFire]] = field(default_factory=dict)
    ends: list[tuple[datetime, str, str]] = field(default_factory=list)  # (end, run id, job)

    def active(self, job_id: str) -> int:
        queued = sum(1 for c, _ in self.queued.values() if c.job_id == job_id)
        return queued + self.load.running_by_job.get(job_id, 0)


def median_durations(history: Mapping[str, Sequence[timedelta]]) -> dict[str, timedelta]:
    """The median of each job's durations (jobs without any are left out)."""
    return {
        job: timedelta(seconds=statistics.median(d.total_seconds() for d in values))
        for job, values in history.items()
        if values
    }


def _fires(
    specs: Mapping[tuple[str, str], ScheduleSpec], start: datetime, end: datetime
) -> list[tuple[datetime, str, ScheduleSpec]]:
    out: list[tuple[datetime, str, ScheduleSpec]] = []
    after = start - timedelta(microseconds=1)
    for spec in specs.values():
        if not spec.enabled:
            continue
        for fire in spec.fires(after):
            utc = fire.astimezone(UTC)
            if utc >= end:
                break
            out.append((utc, spec.name, spec))
            if len(out) > MAX_FIRES:
                raise SimulationTooLarge(
                    f"more than {MAX_FIRES} fires between {start.isoformat()} and "
                    f"{end.isoformat()}; simulate a shorter interval"
                )
    out.sort(key=lambda item: (item[0], item[2].job_id, item[1]))
    return out


def simulate(
    jobs: Mapping[str, Any],
    limits: Limits,
    start: datetime,
    end: datetime,
    *,
    workers: int,
    durations: Mapping[str, timedelta] | None = None,
    default_zone: ZoneInfo | None = None,
    needs: Mapping[str, Mapping[str, int]] | None = None,
    pools: Mapping[str, SimulatedPool] | None = None,
    calendars: Mapping[str, Calendar] | None = None,
) -> list[SimulatedFire]:
    """Every fire in ``[start, end)`` of the enabled schedules of ``jobs`` (``JobConfig``
    by id) and its outcome, in time order. ``limits`` are admission's (built from the same
    config); ``durations`` maps job id to its run duration (default one minute); ``needs``
    maps job id to what its runs hold (pool -> count) and ``pools`` describes those pools
    (see the module docstring)."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("simulate() needs aware start and end times")
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start:
        raise ValueError("the end of the simulation must come after its start")
    specs = all_schedules(dict(jobs), default_zone, calendars)
    policies = {job_id: policy_of(job) for job_id, job in jobs.items()}
    fires = _fires(specs, start, end)
    state = _State(limits, workers, durations or {}, needs or {},
                   {name: (pool, [_Member() for _ in range(pool.size)])
                    for name, pool in (pools or {}).items()})
    out: list[SimulatedFire] = []
    index = 0
    now = start
    deadline = end + HORIZON
    next_check: datetime | None = None
    while True:
        candidates = [fires[index][0]] if index < len(fires) else []
        if state.ends:
            candidates.append(state.ends[0][0])
        if next_check is not None and next_check > now and state.queued:
            candidates.append(next_check)
        if not candidates:
            break
        now = max(now, min(candidates))
        if now > deadline:
            break
        while state.ends and state.ends[0][0] <= now:
            _end, _run, job_id = heapq.heappop(state.ends)
            state.load = state.load.with_finished(job_id)
        while index < len(fires) and fires[index][0] <= now:
            when, _name, spec = fires[index]
            out.append(_fire(state, policies[spec.job_id], spec, when, index))
            index += 1
        next_check = _admit(state, now)
    for _candidate, fire in state.queued.values():
        fire.outcome = "skipped"
        fire.wait_reason = fire.last_reason or "it would not start"
    return out


def _fire(
    state: _State, policy: JobPolicy, spec: ScheduleSpec, when: datetime, index: int
) -> SimulatedFire:
    fire = SimulatedFire(spec.job_id, spec.name, when, spec.zone, run_id=f"sim-{index:09d}")
    plan: list[PlannedRun] = plan_job(
        replace(policy, jitter=timedelta(0)),
        [DueFires(spec, [when])],
        when,
        state.active(spec.job_id),
        random.Random(0),  # never drawn: jitter is zero
    )
    planned = plan[0]
    if planned.state is RunState.MISSED:
        fire.outcome = "missed"
        fire.wait_reason = planned.reason
        return fire
    candidate = Candidate(
        run_id=fire.run_id,
        job_id=spec.job_id,
        queued_at=when,
        priority=policy.priority,
        not_before=planned.not_before,
    )
    state.queued[fire.run_id] = (candidate, fire)
    return fire


def _admit(state: _State, now: datetime) -> datetime | None:
    """Start what admission lets start at ``now``; returns when to decide again."""
    if not state.queued:
        return None
    running_here = len(state.ends)
    decision = admit(
        [c for c, _ in state.queued.values()],
        state.limits,
        state.load,
        now,
        free_slots=max(state.workers - running_here, 0),
    )
    next_check = decision.next_check
    for candidate in decision.admitted:
        duration = state.durations.get(candidate.job_id, DEFAULT_DURATION)
        blocked = _lease(state, candidate, now, now + duration)
        if blocked is not None:
            reason, when = blocked
            _c, fire = state.queued[candidate.run_id]
            if fire.wait_reason is None:
                fire.wait_reason = reason
            fire.last_reason = reason
            if when is not None and (next_check is None or when < next_check):
                next_check = when
            continue
        _c, fire = state.queued.pop(candidate.run_id)
        fire.outcome = "run"
        fire.start = now
        state.load = state.load.with_started(candidate.job_id, now)
        heapq.heappush(state.ends, (now + duration, candidate.run_id, candidate.job_id))
    for run_id, why in decision.waiting.items():
        _c, fire = state.queued[run_id]
        if fire.wait_reason is None:
            fire.wait_reason = why.text
        fire.last_reason = why.text
    return next_check


def _free(member: _Member, now: datetime) -> bool:
    return ((member.held_until is None or member.held_until <= now)
            and (member.cooldown_until is None or member.cooldown_until <= now))


def _lease(state: _State, candidate: Candidate, now: datetime,
           end: datetime) -> tuple[str, datetime | None] | None:
    """Take what the run needs for ``[now, end)`` (all or nothing); else why it waits and
    when a member frees."""
    needs = state.needs.get(candidate.job_id, {})
    for name in sorted(needs):
        count = needs[name]
        pool, members = state.pools.get(name, (SimulatedPool(0, timedelta(0)), []))
        free = [m for m in members if _free(m, now)]
        if len(free) >= count:
            continue
        held = [m for m in members if m.held_until is not None and m.held_until > now]
        cooling = [m for m in members if m not in held and m.cooldown_until is not None
                   and m.cooldown_until > now]
        parts = []
        if held:
            who = sorted({m.holder or "?" for m in held})
            parts.append(f"{len(held)} leased by run{'s' if len(who) > 1 else ''} "
                         + ", ".join(who[:3]) + ("…" if len(who) > 3 else ""))
        if cooling:
            soonest = min(m.cooldown_until for m in cooling if m.cooldown_until is not None)
            parts.append(f"{len(cooling)} cooling down until "
                         f"{soonest.strftime('%H:%M:%S UTC')}")
        if not members:
            parts.append("the pool has no members")
        times = [t for m in members for t in (m.held_until, m.cooldown_until)
                 if t is not None and t > now]
        return (f"waiting for {count} of pool {name}: " + ", ".join(parts),
                min(times) if times else None)
    for name in sorted(needs):
        pool, members = state.pools[name]
        for member in [m for m in members if _free(m, now)][:needs[name]]:
            member.holder, member.held_until = candidate.run_id, end
            member.cooldown_until = end + pool.cooldown
    return None


def history_durations(store: Any, job_ids: Sequence[str], limit: int = 50) -> dict[str, timedelta]:
    """Median duration of the last ``limit`` SUCCEEDED runs of each job (``store`` is a
    :class:`~cadenza.store.Store`); jobs without such runs are left out. Reads only."""
    history: dict[str, list[timedelta]] = {}
    for job_id in job_ids:
        runs = store.list_runs(job=job_id, state=RunState.SUCCEEDED, limit=limit)
        history[job_id] = [
            run.finished_at - run.started_at
            for run in runs
            if run.started_at is not None and run.finished_at is not None
        ]
    return median_durations(history)
