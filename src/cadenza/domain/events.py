"""Event types of the audit log (docs/store.md). Events are append-only."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    RUN_CREATED = "RUN_CREATED"
    RUN_MISSED = "RUN_MISSED"
    RUN_STATE_CHANGED = "RUN_STATE_CHANGED"
    RUN_FINISHED = "RUN_FINISHED"
    STEP_STARTED = "STEP_STARTED"
    STEP_SUCCEEDED = "STEP_SUCCEEDED"
    STEP_FAILED = "STEP_FAILED"
    STEP_STATE_CHANGED = "STEP_STATE_CHANGED"
    RUN_WAITING = "RUN_WAITING"
    # A scheduled run past its start_by or finish_by while still QUEUED / RUNNING (once per
    # deadline; cadenza.notify.rules).
    RUN_LATE = "RUN_LATE"
    # An alert group acknowledged or snoozed by a person (cadenza.store.alert_groups).
    ALERT_CHANGED = "ALERT_CHANGED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    RESOURCE_LEASED = "RESOURCE_LEASED"
    RESOURCE_RELEASED = "RESOURCE_RELEASED"
    RESOURCE_STATE_CHANGED = "RESOURCE_STATE_CHANGED"
    HTTP_REQUEST = "HTTP_REQUEST"
    HEALTH_CHECKED = "HEALTH_CHECKED"
    NOTIFICATION_SENT = "NOTIFICATION_SENT"
    CONFIG_CHANGED = "CONFIG_CHANGED"
    # A save of jobs.toml refused because it broke a security rule (code only from plugins/,
    # files Cadenza keeps private); names the actor.
    CONFIG_REFUSED = "CONFIG_REFUSED"
    # A run's values (--arg, the API's step_args, the form, an operator's preset) refused
    # because they set a step field its type does not mark run-tunable; names the actor, the
    # job, each step and field, never the value.
    RUN_VALUES_REFUSED = "RUN_VALUES_REFUSED"
    USER_LOGIN = "USER_LOGIN"
    USER_CHANGED = "USER_CHANGED"
    SECRET_CHANGED = "SECRET_CHANGED"
    # Run leases (cadenza.store.run_leases): a run taken back from a lost worker; a cancel asked.
    RUN_RECOVERED = "RUN_RECOVERED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    # Maintenance (cadenza.store.maintenance): retention deletes, a restored store.
    RETENTION_PRUNED = "RETENTION_PRUNED"
    STORE_RESTORED = "STORE_RESTORED"
    # The store's health (cadenza.node.reaper, cadenza.store.maintenance): a node whose clock
    # differs from the store's time; a write-ahead log that a reader keeps from shrinking.
    CLOCK_SKEW = "CLOCK_SKEW"
    WAL_GROWING = "WAL_GROWING"
    # The scheduler's leadership on a shared database (cadenza.scheduler.service): a node
    # took a term; a former leader's late write was refused.
    LEADERSHIP = "LEADERSHIP"
    # Scheduling paused or resumed by a person (cadenza.store.desktop): while paused, every
    # scheduled fire is recorded MISSED with who paused it.
    SCHEDULING_CHANGED = "SCHEDULING_CHANGED"


class Level(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
