"""Scheduling (docs/scheduling.md): schedule cursors, missed fires, leader election, simulation.

::

    from cadenza.scheduler import Scheduler, leadership_for
    scheduler = Scheduler(store, loaded_config, clock=clock, leader=leadership_for(store.engine))
    scheduler.run_forever(stop_event)      # in its own thread

Modules: :mod:`~cadenza.scheduler.schedules` (a job's schedules, zones, preset values),
:mod:`~cadenza.scheduler.fires` (pure: fires, previews, missed/overlap decisions),
:mod:`~cadenza.scheduler.service` (the :class:`Scheduler`),
:mod:`~cadenza.scheduler.leader` (which node fires), :mod:`~cadenza.scheduler.simulate`
(``cadenza simulate``). The user guide is ``docs/scheduling.md``.
"""

from __future__ import annotations

from cadenza.scheduler.fires import CreatedRun, TickResult, UpcomingFire, upcoming
from cadenza.scheduler.leader import Leadership, leadership_for
from cadenza.scheduler.schedules import ScheduleSpec, schedules_of, server_zone
from cadenza.scheduler.service import Scheduler

__all__ = [
    "CreatedRun",
    "Leadership",
    "ScheduleSpec",
    "Scheduler",
    "TickResult",
    "UpcomingFire",
    "leadership_for",
    "schedules_of",
    "server_zone",
    "upcoming",
]
