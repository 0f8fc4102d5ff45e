"""Which events notify whom (docs/notifications.md), and the hooks that write the intents.

An event of a job notifies:

* the job's ``[jobs.X.alerts]`` recipients, through the default channel, on ``failed`` and
  ``needs_review`` (``on_failure = true``, the default) and on ``long_run`` (when
  ``long_run`` is set);
* every ``[[rules]]`` whose ``on`` holds the event and whose ``jobs`` globs or ``tags``
  select the job, through the rule's ``channel`` (else the default channel).

Run ends become events only when final: SUCCEEDED (``succeeded``, and ``recovered`` when
the job's previous finished run FAILED), FAILED, NEEDS_REVIEW, CANCELED. A retry's re-queue
(QUEUED) is no event: a job with ``attempts = 3`` that fails three times sends one alert.
MISSED fires are ``missed``; a run RUNNING past its job's ``alerts.long_run`` is
``long_run`` (once per run); a schedule that should have fired and has no run row after its
``missed_grace`` plus :data:`STALL_MARGIN` is ``stalled`` (once until it fires again).

:class:`Notifier` holds the current configuration and writes the intents: its
:meth:`~Notifier.run_end_hook` runs in the transaction of every run end
(a run end hook), :meth:`~Notifier.missed_hook` in the scheduler's transaction
that records MISSED fires (a missed hook; both wired by :mod:`cadenza.assembly`, one notifier
per store, following the configuration it was last given); :meth:`~Notifier.check_long_runs`
and :meth:`~Notifier.check_stalled` are rounds of the sender service.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.types import parse_deadline
from cadenza.domain.deadlines import deadline_at
from cadenza.domain.events import EventType, Level
from cadenza.domain.states import RunState
from cadenza.store import Store
from cadenza.store.boundary import EndedRun
from cadenza.store.outbox import (
    Intent,
    Outbox,
    Target,
    fire_recorded,
    last_fire_recorded,
    late_recorded,
    previous_end_failed,
    running_of,
    unfinished_fires,
)

log = logging.getLogger(__name__)

STALL_MARGIN = timedelta(seconds=60)
"""Slack beyond a job's ``missed_grace`` before a silent schedule counts as stalled."""
STALL_LOOKBACK = timedelta(hours=1)
"""How far back (beyond the grace) the stalled check looks: it runs every minute, so a
silent fire older than this was seen by an earlier check."""
"""The attribute of a store holding its current :class:`Notifier`."""
_EVENTS = {RunState.SUCCEEDED: "succeeded", RunState.FAILED: "failed",
           RunState.NEEDS_REVIEW: "needs_review", RunState.CANCELED: "canceled",
           RunState.MISSED: "missed"}


def selects(patterns: Sequence[str], tags: Sequence[str], job: JobConfig | None,
            job_id: str) -> bool:
    """Whether a rule with these ``jobs`` globs and ``tags`` selects the job."""
    if any(fnmatch.fnmatchcase(job_id, p) for p in patterns):
        return True
    return job is not None and bool(set(tags) & set(job.tags))


def targets_for(event: str, job_id: str | None, config: LoadedConfig) -> list[Target]:
    """Who ``event`` of ``job_id`` notifies (see the module docstring), in order: the job's
    alerts, then the rules in file order."""
    job = config.jobs.get(job_id or "")
    out: list[Target] = []
    if job is not None and job.alerts.recipients:
        alerts = job.alerts
        if (event in ("failed", "needs_review") and alerts.on_failure) or (
                event == "long_run" and alerts.long_run is not None) or event == "late":
            out.append(Target("alerts", None, tuple(alerts.recipients)))
    for rule in config.settings.rules:
        if event in rule.on and (job_id is None or selects(rule.jobs, rule.tags, job, job_id)):
            out.append(Target(f"rule:{rule.name}", rule.channel, tuple(rule.notify)))
    return out


class Notifier:
    """Writes message intents into the outbox, from the configuration of ``config()``."""

    def __init__(self, store: Store, config: Callable[[], LoadedConfig] | None) -> None:
        self.store = store
        self.config = config
        self.outbox = Outbox(store)
        self.wake: Callable[[], None] = lambda: None
        """Called after intents were written (the sender sets it to wake its loop)."""
        self._long_runs: tuple[LoadedConfig, dict[str, timedelta]] | None = None
        self._watches_time: tuple[LoadedConfig, bool] | None = None
        """The configuration last read and its jobs' ``alerts.long_run`` (read once per
        configuration, not at every look of the sender)."""
        self._deadlines: tuple[LoadedConfig, dict[tuple[str, str], tuple[
            ZoneInfo, str | None, str | None]]] | None = None
        """The configuration last read and its schedules' deadlines (likewise)."""

    def run_end_hook(self, conn: sa.Connection, ended: Sequence[EndedRun],
                     now: datetime) -> None:
        """In the run end's transaction: an intent per final run end that notifies."""
        config = self._config("run end", [r.run_id for r in ended])
        if config is None:
            return
        intents: list[Intent] = []
        for run in ended:
            event = _EVENTS.get(RunState(run.state))
            if event is None:
                continue  # QUEUED again (a retry, a deferral): not final, no message
            intents += self._intents(event, run.run_id, run.job_id, config)
            if event == "succeeded":
                recovered = targets_for("recovered", run.job_id, config)
                if recovered and previous_end_failed(conn, run.job_id, run.run_id):
                    intents.append(Intent(f"recovered:{run.run_id}", "recovered", run.run_id,
                                          run.job_id, tuple(recovered), {}))
        if intents and self.outbox.add(conn, intents, now):
            self.wake()

    def missed_hook(self, conn: sa.Connection, missed: Sequence[tuple[str, str]],
                    now: datetime) -> None:
        """In the scheduler's transaction: an intent per MISSED fire (run id, job id)."""
        config = self._config("MISSED fire", [run_id for run_id, _ in missed])
        if config is None:
            return
        intents = [i for run_id, job_id in missed
                   for i in self._intents("missed", run_id, job_id, config)]
        if intents and self.outbox.add(conn, intents, now):
            self.wake()

    def _config(self, what: str, run_ids: Sequence[str]) -> LoadedConfig | None:
        """The configuration, or None when it cannot be loaded (a command that ends a run
        while jobs.toml is broken, e.g. a cancel): the change itself must not fail for it.
        None without a configuration to follow (a store no home configures: a test's)."""
        if self.config is None:
            return None
        try:
            return self.config()
        except Exception as exc:
            log.warning("no notification queued for the %s of run(s) %s: the configuration "
                        "cannot be loaded (%s)", what, ", ".join(run_ids), exc)
            return None

    def _intents(self, event: str, run_id: str, job_id: str,
                 config: LoadedConfig) -> list[Intent]:
        targets = targets_for(event, job_id, config)
        return [Intent(f"{event}:{run_id}", event, run_id, job_id, tuple(targets), {})] \
            if targets else []

    def watches_time(self) -> bool:
        """Whether a rule of the configuration looks at the clock, not only at the store: a
        job's ``alerts.long_run``, a deadline (``start_by``, ``finish_by``) or a rule ``on``
        ``stalled``. The sender then makes every round's looks, even while nothing was
        committed since the last one. Computed once per configuration."""
        if self.config is None:
            return False
        config = self.config()
        if self._watches_time is None or self._watches_time[0] is not config:
            timed = (any(job.alerts.long_run is not None for job in config.jobs.values())
                     or bool(_deadlines(config))
                     or any("stalled" in rule.on for rule in config.settings.rules))
            self._watches_time = (config, timed)
        return self._watches_time[1]

    def check_long_runs(self, now: datetime) -> int:
        """An intent per RUNNING run past its job's ``alerts.long_run`` (once per run: the
        key is ``long_run:RUN``). Returns how many were new."""
        if self.config is None:
            return 0
        config = self.config()
        if self._long_runs is None or self._long_runs[0] is not config:
            self._long_runs = (config, {job_id: job.alerts.long_run
                                        for job_id, job in config.jobs.items()
                                        if job.alerts.long_run is not None})
        limits = self._long_runs[1]
        if not limits:
            return 0
        with self.store.read() as c:
            rows = running_of(c, list(limits))
        intents: list[Intent] = []
        for run_id, job_id, started in rows:
            limit = limits[job_id]
            if started is None or limit is None or started + limit > now:
                continue
            targets = targets_for("long_run", job_id, config)
            if targets:
                intents.append(Intent(f"long_run:{run_id}", "long_run", run_id, job_id,
                                      tuple(targets), {"long_run": _duration(limit)}))
        if not intents:
            return 0
        with self.store.write() as c:
            return self.outbox.add(c, intents, now)

    def check_late(self, now: datetime) -> int:
        """An intent per scheduled run past a deadline of its job or preset, while it is
        late: QUEUED past ``start_by`` (key ``late:start:RUN``), not finished (QUEUED or
        RUNNING) past ``finish_by`` (``late:finish:RUN``); once each. A run that ended before
        this look is not late any more: nothing is sent. Returns how many were new."""
        if self.config is None:
            return 0
        config = self.config()
        if self._deadlines is None or self._deadlines[0] is not config:
            self._deadlines = (config, _deadlines(config))  # once per configuration
        deadlines = self._deadlines[1]
        if not deadlines:
            return 0
        rows = unfinished_fires(self.store, sorted({job_id for job_id, _ in deadlines}))
        intents: list[Intent] = []
        events: list[tuple[str, str, dict[str, str]]] = []
        for run_id, job_id, schedule, state, scheduled_for in rows:
            found = deadlines.get((job_id, schedule or "job"))
            if found is None:
                continue
            zone, start_by, finish_by = found
            checks = (("start", start_by, state == RunState.QUEUED.value),
                      ("finish", finish_by, True))
            for which, deadline, applies in checks:
                if deadline is None or not applies:
                    continue
                due = deadline_at(parse_deadline(deadline), scheduled_for, zone)
                if now < due:
                    continue
                facts = {"deadline": f"{which}_by", "due": due.isoformat(),
                         "deadline_text": deadline, "state": state}
                events.append((run_id, which, facts))
                targets = targets_for("late", job_id, config)
                if targets:
                    intents.append(Intent(f"late:{which}:{run_id}", "late", run_id, job_id,
                                          tuple(targets), facts))
        if not events:
            return 0
        with self.store.write() as c:
            told = late_recorded(c, [run_id for run_id, _, _ in events])
            fresh = [e for e in events if (e[0], e[2]["deadline"]) not in told]
            for run_id, which, facts in fresh:
                verb = "started" if which == "start" else "finished"
                self.store.append_event(
                    EventType.RUN_LATE, f"late: not {verb} by {facts['deadline']} = "
                    f"{facts['deadline_text']} (due {facts['due']}), still {facts['state']}",
                    run_id=run_id, level=Level.WARNING, payload=facts, conn=c)
            added = self.outbox.add(c, intents, now) if intents else 0
        if fresh:
            log.warning("%d scheduled run(s) late for a deadline (start_by / finish_by)",
                        len(fresh))
        return added

    def check_stalled(self, now: datetime, since: datetime) -> int:
        """An intent per enabled schedule whose newest fire in ``(since, now - grace]`` has
        no run row (``grace``: the job's ``missed_grace`` + :data:`STALL_MARGIN`). Keyed by the
        schedule's last recorded fire, so a scheduler down for hours alerts once until the
        schedule fires again. Returns how many were new."""
        from cadenza.scheduler.fires import FireStream
        from cadenza.scheduler.schedules import all_schedules, calendars_of

        if self.config is None:
            return 0
        config = self.config()
        if not any("stalled" in rule.on for rule in config.settings.rules):
            return 0
        intents: list[Intent] = []
        with self.store.read() as c:
            specs = all_schedules(config.jobs, None, calendars_of(config))
            for (job_id, name), spec in specs.items():
                job = config.jobs[job_id]
                if not spec.enabled or not job.enabled:
                    continue
                grace = job.missed_grace + STALL_MARGIN
                start = max(since, now - grace - STALL_LOOKBACK)
                # The newest fire past its grace tells whether the schedule fires now.
                fires = FireStream(spec, start).between(start, now - grace)[-1:]
                if not fires:
                    continue
                if fire_recorded(c, job_id, name, fires[0]):
                    continue
                silent = fires
                last = last_fire_recorded(c, job_id, name)
                targets = targets_for("stalled", job_id, config)
                if targets:
                    anchor = last.isoformat() if last is not None else "never"
                    intents.append(Intent(
                        f"stalled:{job_id}:{name}:{anchor}", "stalled", None, job_id,
                        tuple(targets), {"schedule": name, "scheduled_for":
                                         silent[0].isoformat(), "grace": _duration(grace)}))
        if not intents:
            return 0
        with self.store.write() as c:
            added = self.outbox.add(c, intents, now)
        if added:
            log.warning("%d schedule(s) did not fire on time: the scheduler may be down or "
                        "wedged (stalled alert queued)", added)
        return added


def _deadlines(config: LoadedConfig
               ) -> dict[tuple[str, str], tuple[ZoneInfo, str | None, str | None]]:
    """(job id, schedule name) → (zone, start_by, finish_by) of each schedule with a
    deadline; a preset's unset deadline is its job's."""
    from cadenza.scheduler.schedules import JOB_SCHEDULE, preset_schedule_name, server_zone

    out: dict[tuple[str, str], tuple[ZoneInfo, str | None, str | None]] = {}
    for job_id, job in config.jobs.items():
        zone = ZoneInfo(job.timezone) if job.timezone else server_zone()
        if job.start_by or job.finish_by:
            out[(job_id, JOB_SCHEDULE)] = (zone, job.start_by, job.finish_by)
        for name, preset in job.presets.items():
            start_by, finish_by = preset.start_by or job.start_by, \
                preset.finish_by or job.finish_by
            if start_by or finish_by:
                own = ZoneInfo(preset.timezone) if preset.timezone else zone
                out[(job_id, preset_schedule_name(name))] = (own, start_by, finish_by)
    return out


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds % 3600 == 0 and seconds:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0 and seconds:
        return f"{seconds // 60}m"
    return f"{seconds}s"
