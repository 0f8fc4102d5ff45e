"""The store's tables (SQLAlchemy Core): one schema for SQLite and PostgreSQL.

Conventions: ids of runs are ULID-like strings (:mod:`cadenza.store.codec`); other rows use
autoincrement integers (never reused on SQLite either, so ``after_id`` cursors stay valid after
pruning); every timestamp is :class:`~cadenza.store.codec.UTCDateTime`; JSON is text (``*_json``);
states are checked by the database as well as by the transition tables.

The Alembic migrations under ``migrations/versions`` create exactly this schema; a contract test
compares the two on both dialects. Change both together.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa

from cadenza.domain.states import ResourceState, RunState, StepState
from cadenza.store.codec import UTCDateTime

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING)

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""An autoincrement key: BIGINT on PostgreSQL, INTEGER PRIMARY KEY (the rowid) on SQLite."""

RESOURCE_KINDS = ("unit", "route", "credential")
NOTIFICATION_STATES = ("SENT", "FAILED")


def in_list(column: str, values: Iterable[StrEnum | str]) -> str:
    """SQL text of a CHECK that ``column`` holds one of ``values``."""
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"


def _ts(name: str, nullable: bool = True) -> sa.Column[datetime]:
    return sa.Column(name, UTCDateTime(), nullable=nullable)


runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(26), primary_key=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    # scheduled | manual | call_job:<parent job>@<parent run>
    sa.Column("trigger", sa.String(200), nullable=False),
    # Name of the schedule that fired the run (the job's own, or a preset's); NULL for others.
    sa.Column("schedule", sa.String(128), nullable=True),
    _ts("scheduled_for"),
    _ts("created_at", nullable=False),
    _ts("started_at"),
    _ts("finished_at"),
    _ts("not_before"),
    sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("params_json", sa.Text(), nullable=False, server_default="{}"),
    sa.Column("overrides_json", sa.Text(), nullable=False, server_default="{}"),
    sa.Column("rows", sa.BigInteger(), nullable=True),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("reason", sa.Text(), nullable=True),
    sa.Column("wait_reason", sa.Text(), nullable=True),
    sa.Column("lease_owner", sa.String(200), nullable=True),
    _ts("lease_until"),
    sa.Column("lease_epoch", sa.Integer(), nullable=False, server_default="0"),
    # Attempts spent by the run's retry policy; reset by a resume.
    sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"),
    # Times an operator resumed the run from NEEDS_REVIEW.
    sa.Column("resumes", sa.Integer(), nullable=False, server_default="0"),
    _ts("updated_at", nullable=False),
    # A cancel request (``runs cancel`` from any process); the lease holder acts on it.
    sa.Column("cancel_requested_by", sa.String(128), nullable=True),
    _ts("cancel_requested_at"),
    # The run and step of the call_job that created this run (migration 0010); NULL otherwise.
    sa.Column("parent_run_id", sa.String(26), nullable=True),
    sa.Column("parent_step", sa.String(128), nullable=True),
    # Times the reaper took the run back from a lost worker (migration 0019): with resumes,
    # the reaper's budget before NEEDS_REVIEW (cadenza.store.run_states.reap_decision).
    sa.Column("recoveries", sa.Integer(), nullable=False, server_default="0"),
    # A fire is recorded once. Scheduled runs always carry both schedule and scheduled_for
    # (the CHECK below), so no NULL can slip past the constraint on either dialect.
    sa.UniqueConstraint("job_id", "schedule", "scheduled_for"),
    sa.CheckConstraint(in_list("state", RunState), name="state"),
    sa.CheckConstraint("schedule IS NULL OR scheduled_for IS NOT NULL", name="fire"),
    sa.Index(None, "job_id", "created_at"),
    sa.Index(None, "created_at"),
)
# The admission order of queued runs (migrations 0002, 0003, 0005): highest priority first,
# then the scheduled time (``QUEUED_AT``), then id; queued runs only.
_QUEUED_ONLY = sa.text("state = 'QUEUED'")
QUEUED_AT = sa.func.coalesce(runs.c.scheduled_for, runs.c.created_at)
"""When a run was due: its scheduled time, or its creation for a run without one."""
sa.Index("ix_runs_claim_order", runs.c.state, runs.c.priority.desc(), QUEUED_AT,
         runs.c.id, sqlite_where=_QUEUED_ONLY, postgresql_where=_QUEUED_ONLY)
# The starts of a job in the last hour (admission's budget_per_hour, migration 0006); runs
# that never started are not in it.
_STARTED = sa.text("started_at IS NOT NULL")
sa.Index("ix_runs_job_started", runs.c.job_id, runs.c.started_at,
         sqlite_where=_STARTED, postgresql_where=_STARTED)
# A call_job's child, once per parent run and step (migration 0010): its operation key.
# Partial (migration 0023), like the two below: a run enters an index only while it is
# in the state the index is read for. Every index a row enters costs its INSERT and each
# UPDATE that moves it (on PostgreSQL no update of ``runs`` is HOT: ``state`` is indexed),
# and most runs are top-level runs that end.
_HAS_PARENT = sa.text("parent_run_id IS NOT NULL")
sa.Index("ix_runs_parent", runs.c.parent_run_id, runs.c.parent_step, unique=True,
         sqlite_where=_HAS_PARENT, postgresql_where=_HAS_PARENT)
# The runs RUNNING (migration 0023): a decision counts them by job, the reaper reads their
# leases, a node renews them. Only the running runs are in it, so an ended run's row has
# left it, and ``lease_until`` is not in it: a lease renewal changes no indexed column.
# The queries say ``state = 'RUNNING'`` as a literal: a partial index is used only for a
# WHERE that implies its own (with SQLite's statistics, the count by job walked a whole
# job index instead: 11 ms among 40,000 runs). ``state`` leads both partial indexes,
# though it has one value in each: SQLite's planner, without statistics, prefers an
# index whose first column the WHERE fixes (``ix_runs_state_created``, and a sort).
RUNNING_ONLY = "state = 'RUNNING'"
"""The condition of ``ix_runs_running``: the queries that use it repeat it."""
sa.Index("ix_runs_running", runs.c.state, runs.c.job_id, sqlite_where=sa.text(RUNNING_ONLY),
         postgresql_where=sa.text(RUNNING_ONLY))
IS_RUNNING = runs.c.state == sa.literal_column("'RUNNING'")
"""``runs.state = 'RUNNING'`` with the state as a literal, as ``ix_runs_running`` needs it
(a bound parameter does not imply the index's condition)."""
# The queued runs held by ``not_before`` (a retry's delay, a deferral), released first
# first (migration 0023): most queued runs have none and never enter it.
HELD_ONLY = "state = 'QUEUED' AND not_before IS NOT NULL"
"""The condition of ``ix_runs_held``; the admission's held read (``_HELD_READ``) spells it out."""
sa.Index("ix_runs_held", runs.c.state, runs.c.not_before, sqlite_where=sa.text(HELD_ONLY),
         postgresql_where=sa.text(HELD_ONLY))
# The history by state, newest first (migration 0012): a page of one state is one range.
sa.Index("ix_runs_state_created", runs.c.state, runs.c.created_at, runs.c.id)
# The history filtered by trigger (the runs page's trigger filter, ``GET /api/runs?trigger=``):
# one ordered index range, not a walk of every run for a trigger that matches few.
sa.Index("ix_runs_trigger_created", runs.c.trigger, runs.c.created_at, runs.c.id)

step_runs = sa.Table(
    "step_runs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column(
        "run_id", sa.String(26), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("step", sa.String(128), nullable=False),
    sa.Column("step_type", sa.String(64), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text(), nullable=True),
    _ts("created_at", nullable=False),
    _ts("started_at"),
    _ts("finished_at"),
    sa.Column("rows", sa.BigInteger(), nullable=True),
    sa.Column("output_json", sa.Text(), nullable=True),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("error_class", sa.String(32), nullable=True),
    _ts("updated_at", nullable=False),
    sa.UniqueConstraint("run_id", "step", "attempt"),
    sa.CheckConstraint(in_list("state", StepState), name="state"),
    sqlite_autoincrement=True,
)

run_logs = sa.Table(
    "run_logs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column(
        "run_id", sa.String(26), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
    ),
    _ts("ts", nullable=False),
    sa.Column("level", sa.String(10), nullable=False),
    sa.Column("step", sa.String(128), nullable=True),
    sa.Column("message", sa.Text(), nullable=False),
    sa.Index(None, "run_id", "id"),
    sqlite_autoincrement=True,
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column(
        "run_id", sa.String(26), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("next_step", sa.String(128), nullable=True),
    sa.Column("outputs_json", sa.Text(), nullable=False, server_default="{}"),
    sa.Column("step_state_json", sa.Text(), nullable=True),
    _ts("updated_at", nullable=False),
)

# Kept beyond retention on purpose: an effect must not be applied twice even after its run
# was pruned, so run_id is informative only (no foreign key).
operation_keys = sa.Table(
    "operation_keys",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("key", sa.String(512), nullable=False),
    sa.Column("result_json", sa.Text(), nullable=True),
    sa.Column("run_id", sa.String(26), nullable=True),
    _ts("created_at", nullable=False),
    sa.UniqueConstraint("job_id", "key"),
    sqlite_autoincrement=True,
)

schedule_cursors = sa.Table(
    "schedule_cursors",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("schedule", sa.String(128), primary_key=True),
    _ts("last_fire"),
    _ts("updated_at", nullable=False),
)

resources = sa.Table(
    "resources",
    metadata,
    sa.Column("resource_id", sa.String(128), primary_key=True),
    sa.Column("pool", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    # The id of the RUN that holds the member (LEASED, RUNNING), not a worker: a resource
    # lease is a run's hold on a member; ``runs.lease_owner`` is the worker holding that run.
    sa.Column("lease_owner", sa.String(200), nullable=True),
    _ts("lease_until"),
    sa.Column("lease_epoch", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("route_id", sa.String(128), nullable=True),
    sa.Column("last_error", sa.Text(), nullable=True),
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
    # The step that leased it (its end releases it); NULL: held for the whole run (0012).
    sa.Column("lease_step", sa.String(128), nullable=True),
    sa.CheckConstraint(in_list("state", ResourceState), name="state"),
    sa.CheckConstraint(in_list("kind", RESOURCE_KINDS), name="kind"),
    # Not on state, which every lease and release changes: on PostgreSQL those updates are
    # then HOT, and the table keeps its live size without VACUUM (migration 0014, which also
    # sets fillfactor 50 there).
    sa.Index(None, "pool"),
    postgresql_with={"fillfactor": 50},
)

resource_health = sa.Table(
    "resource_health",
    metadata,
    sa.Column(
        "resource_id",
        sa.String(128),
        sa.ForeignKey("resources.resource_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    _ts("last_checked_at"),
    sa.Column("latency_ms", sa.Float(), nullable=True),
    sa.Column("consecutive_successes", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("recent_timeouts", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("last_error_type", sa.String(64), nullable=True),
    _ts("cooldown_until"),
    sa.Column("score", sa.Float(), nullable=True),
    sa.Column("egress_ip", sa.String(64), nullable=True),
    sa.Column("egress_region", sa.String(16), nullable=True),
    _ts("updated_at", nullable=False),
)

# One row: a counter that SQLite triggers bump with every write that can change an admission
# decision (a run inserted or deleted; its state, not_before, priority, lease epoch or job
# changed). What a staged claim checks (store/claims.py, migration 0007); not kept on
# PostgreSQL, where the table stays empty.
runs_version = sa.Table(
    "runs_version",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
)

# One row per role led by one node at a time (``scheduler``): its holder, its fencing token
# and the end of its lease, on the database's clock (store/leadership.py, migration 0020).
# Used on PostgreSQL only; a SQLite store leads through an OS file lock.
leadership = sa.Table(
    "leadership",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("epoch", sa.BigInteger(), nullable=False),
    sa.Column("since", UTCDateTime(), nullable=False),
    sa.Column("until", UTCDateTime(), nullable=False),
)

# Append-only (an UPDATE trigger refuses changes; retention may DELETE). No foreign keys:
# the audit log outlives pruned runs and removed resources.
event_log = sa.Table(
    "event_log",
    metadata,
    sa.Column("event_id", BigId, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(26), nullable=True),
    sa.Column("resource_id", sa.String(128), nullable=True),
    sa.Column("event_type", sa.String(40), nullable=False),
    sa.Column("level", sa.String(10), nullable=False),
    sa.Column("message", sa.Text(), nullable=False),
    sa.Column("payload_json", sa.Text(), nullable=True),
    _ts("created_at", nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Index(None, "run_id", "event_id"),
    sa.Index(None, "created_at"),
    # The audit log filtered by type or by actor, newest first (a keyset on event_id); by
    # type and time, from the window's first event_id (``list_events``, migration 0025).
    sa.Index("ix_event_log_type_event", "event_type", "event_id"),
    sqlite_autoincrement=True,
)
# Partial (migration 0016): every index an event enters costs its write ~5 us on SQLite,
# and most events are a run's, written by the system. A resource's history reads the events
# that name a resource (``resource_id = ?`` implies the index's condition); the audit log by
# actor reads a person's or a token's events, and adds ``actor <> 'system'`` to use it (the
# system's are most events: newest first, a page of them is found without an index).
EVENT_ACTOR_INDEXED = "actor <> 'system'"
"""The condition of ``ix_event_log_actor_event``: the queries by actor repeat it."""
RESOURCE_EVENTS = "resource_id IS NOT NULL"
"""The condition of the two indexes of events that name a resource
(``ix_event_log_resource_id_event_id``, ``ix_event_log_resource_type_created``): the
queries by type and time repeat it (``resource_id = ?`` implies it)."""
_HAS_RESOURCE = sa.text(RESOURCE_EVENTS)
_NOT_SYSTEM = sa.text(EVENT_ACTOR_INDEXED)
sa.Index("ix_event_log_resource_id_event_id", event_log.c.resource_id, event_log.c.event_id,
         sqlite_where=_HAS_RESOURCE, postgresql_where=_HAS_RESOURCE)
sa.Index("ix_event_log_actor_event", event_log.c.actor, event_log.c.event_id,
         sqlite_where=_NOT_SYSTEM, postgresql_where=_NOT_SYSTEM)
# A pool's history by type and time (its figures, its utilization, the recent health
# checks), events that name a resource only (migration 0025): the queries say
# ``RESOURCE_EVENTS``, and a run's events stay out of it.
sa.Index("ix_event_log_resource_type_created", event_log.c.event_type, event_log.c.created_at,
         sqlite_where=_HAS_RESOURCE, postgresql_where=_HAS_RESOURCE)

users = sa.Table(
    "users",
    metadata,
    sa.Column("username", sa.String(64), primary_key=True),
    sa.Column("display_name", sa.String(200), nullable=True),
    sa.Column("email", sa.String(320), nullable=True),
    sa.Column("password_hash", sa.Text(), nullable=False),
    sa.Column("roles_json", sa.Text(), nullable=False, server_default="[]"),
    sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()),
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
    sa.Column("language", sa.String(16), nullable=True),
    sa.Column("timezone", sa.String(64), nullable=True),
)

# ``id`` holds a hash of the session cookie value, never the value itself.
sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column(
        "username",
        sa.String(64),
        sa.ForeignKey("users.username", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("csrf_token", sa.String(128), nullable=False),
    _ts("created_at", nullable=False),
    _ts("expires_at", nullable=False),
    _ts("revoked_at"),
    _ts("last_seen_at"),
    sa.Index(None, "username"),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
    sa.Column(
        "username",
        sa.String(64),
        sa.ForeignKey("users.username", ondelete="CASCADE"),
        nullable=True,
    ),
    sa.Column("roles_json", sa.Text(), nullable=False, server_default="[]"),
    _ts("created_at", nullable=False),
    _ts("revoked_at"),
    _ts("last_used_at"),
)

notification_log = sa.Table(
    "notification_log",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    # (event, run, recipient) dedup key, e.g. "FAILED:<run id>:ops@example.org".
    sa.Column("event_key", sa.String(512), nullable=False, unique=True),
    sa.Column("run_id", sa.String(26), nullable=True),
    sa.Column("channel", sa.String(64), nullable=False),
    sa.Column("recipient", sa.String(320), nullable=False),
    sa.Column("state", sa.String(8), nullable=False),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
    sa.CheckConstraint(in_list("state", NOTIFICATION_STATES), name="state"),
    sa.Index(None, "run_id"),
    sqlite_autoincrement=True,
)

# The notifications' outbox (migration 0009): one row per message intent, written in the
# transaction of the state change that causes it; ``event_key`` (e.g. "failed:<run id>")
# makes a second write of one intent a no-op. The sender claims rows (claimed_by/_until).
OUTBOX_STATES = ("PENDING", "DONE")
notification_outbox = sa.Table(
    "notification_outbox",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("event_key", sa.String(512), nullable=False, unique=True),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("run_id", sa.String(26), nullable=True),
    sa.Column("job_id", sa.String(64), nullable=True),
    sa.Column("targets_json", sa.Text(), nullable=False),
    sa.Column("context_json", sa.Text(), nullable=False, server_default="{}"),
    sa.Column("state", sa.String(8), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
    _ts("not_before", nullable=False),
    sa.Column("claimed_by", sa.String(128), nullable=True),
    _ts("claimed_until"),
    sa.Column("last_error", sa.Text(), nullable=True),
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
    sa.CheckConstraint(in_list("state", OUTBOX_STATES), name="state"),
    sa.Index("ix_notification_outbox_due", "state", "not_before"),
    sqlite_autoincrement=True,
)

# Failed logins, for throttling per user and per address (store/sessions.py); pruned as
# they age out of the throttling window.
login_failures = sa.Table(
    "login_failures",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("username", sa.String(64), nullable=False),
    sa.Column("address", sa.String(64), nullable=False),
    _ts("failed_at", nullable=False),
    sa.Index(None, "username", "failed_at"),
    sa.Index(None, "address", "failed_at"),
)

# Idempotency-Key of POST /api/jobs/{id}/runs: one row per (principal, key), inserted
# before the run exists, so that concurrent requests with one key agree on one run.
idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("principal", sa.String(140), primary_key=True),
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("body_hash", sa.String(64), nullable=False),
    sa.Column("run_id", sa.String(26), nullable=True),
    _ts("created_at", nullable=False),
)

# Alert groups (migration 0021, docs/notifications.md "Repeated failures"): the failures of
# one job with one error class, from the first alert to the recovery. ``open_key``
# ("job:class") is set while the group is open and NULL once closed, so that one group per
# key is open at a time (NULLs do not collide in a unique index).
alert_groups = sa.Table(
    "alert_groups",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("open_key", sa.String(300), nullable=True, unique=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("error_class", sa.String(200), nullable=False),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("failures", sa.Integer(), nullable=False),
    sa.Column("told", sa.Integer(), nullable=False),
    sa.Column("first_run_id", sa.String(26), nullable=True),
    sa.Column("last_run_id", sa.String(26), nullable=True),
    sa.Column("targets_json", sa.Text(), nullable=False),
    _ts("opened_at", nullable=False),
    _ts("last_failure_at", nullable=False),
    _ts("last_told_at", nullable=False),
    _ts("snoozed_until"),
    sa.Column("snoozed_by", sa.String(200), nullable=True),
    _ts("acked_at"),
    sa.Column("acked_by", sa.String(200), nullable=True),
    _ts("closed_at"),
    sa.Index(None, "job_id", "closed_at"),
    sqlite_autoincrement=True,
)

# One-use links of alert e-mails (snooze, acknowledge without logging in): the SHA-256 of a
# random token, what it does to which group, until when; ``used_at`` once used.
alert_links = sa.Table(
    "alert_links",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("group_id", sa.BigInteger(), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    _ts("expires_at", nullable=False),
    _ts("used_at"),
)

desktop_tickets = sa.Table(
    "desktop_tickets",
    metadata,
    sa.Column("ticket_hash", sa.String(64), primary_key=True),
    sa.Column("username", sa.String(64), nullable=False),
    sa.Column("os_user", sa.String(200), nullable=False),
    _ts("expires_at", nullable=False),
    _ts("used_at"),
)

scheduling_pause = sa.Table(
    "scheduling_pause",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    _ts("paused_at", nullable=False),
    sa.Column("paused_by", sa.String(200), nullable=False),
)

# The nodes serving the store and their workers (migration 0026; PostgreSQL only, where
# several nodes share one cluster cap): each node writes its row every few seconds on the
# database's clock and deletes it when it stops; a row not written for a while is a node
# gone (store/roster.py). A node's runs claimed ahead of its workers take its share of the
# cap's room beyond every node's workers, no more (docs/admission.md).
nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("owner", sa.String(200), primary_key=True),
    sa.Column("workers", sa.Integer(), nullable=False),
    _ts("seen_at", nullable=False),
)

ALL_TABLES = tuple(metadata.sorted_tables)
