"""The initial schema: runs, step runs, logs, checkpoints, keys, cursors, resources, audit, users.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

A migration is a frozen snapshot: it spells the schema out instead of importing
``cadenza.store.tables``, so later changes to the tables need a new revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
RUN_STATES = "'QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED', 'MISSED', 'NEEDS_REVIEW'"
STEP_STATES = "'PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELED'"
RESOURCE_STATES = "'AVAILABLE', 'LEASED', 'RUNNING', 'COOLDOWN', 'FAULT', 'DISABLED'"


def _id(name: str = "id") -> sa.Column[int]:
    return sa.Column(name, BIG_ID, primary_key=True, autoincrement=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("trigger", sa.String(200), nullable=False),
        sa.Column("schedule", sa.String(128), nullable=True),
        sa.Column("scheduled_for", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("not_before", TS, nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("params_json", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("overrides_json", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("rows", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("wait_reason", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_until", TS, nullable=True),
        sa.Column("lease_epoch", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("resumes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint(
            "job_id", "schedule", "scheduled_for", name="uq_runs_job_id_schedule_scheduled_for"
        ),
        sa.CheckConstraint(f"state IN ({RUN_STATES})", name="ck_runs_state"),
        sa.CheckConstraint("schedule IS NULL OR scheduled_for IS NOT NULL", name="ck_runs_fire"),
    )
    op.create_index("ix_runs_job_id_created_at", "runs", ["job_id", "created_at"])
    op.create_index(
        "ix_runs_state_not_before_priority", "runs", ["state", "not_before", "priority"]
    )
    op.create_index("ix_runs_state_lease_until", "runs", ["state", "lease_until"])
    op.create_index("ix_runs_created_at", "runs", ["created_at"])

    op.create_table(
        "step_runs",
        _id(),
        sa.Column("run_id", sa.String(26), nullable=False),
        sa.Column("step", sa.String(128), nullable=False),
        sa.Column("step_type", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("rows", sa.BigInteger(), nullable=True),
        sa.Column("output_json", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_class", sa.String(32), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_step_runs"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_step_runs_run_id_runs", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("run_id", "step", "attempt", name="uq_step_runs_run_id_step_attempt"),
        sa.CheckConstraint(f"state IN ({STEP_STATES})", name="ck_step_runs_state"),
        sqlite_autoincrement=True,
    )

    op.create_table(
        "run_logs",
        _id(),
        sa.Column("run_id", sa.String(26), nullable=False),
        sa.Column("ts", TS, nullable=False),
        sa.Column("level", sa.String(10), nullable=False),
        sa.Column("step", sa.String(128), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_run_logs"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_run_logs_run_id_runs", ondelete="CASCADE"
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_run_logs_run_id_id", "run_logs", ["run_id", "id"])

    op.create_table(
        "checkpoints",
        sa.Column("run_id", sa.String(26), nullable=False),
        sa.Column("next_step", sa.String(128), nullable=True),
        sa.Column("outputs_json", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("step_state_json", sa.Text(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_checkpoints"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_checkpoints_run_id_runs", ondelete="CASCADE"
        ),
    )

    op.create_table(
        "operation_keys",
        _id(),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(26), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_operation_keys"),
        sa.UniqueConstraint("job_id", "key", name="uq_operation_keys_job_id_key"),
        sqlite_autoincrement=True,
    )

    op.create_table(
        "schedule_cursors",
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("schedule", sa.String(128), nullable=False),
        sa.Column("last_fire", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "schedule", name="pk_schedule_cursors"),
    )

    op.create_table(
        "resources",
        sa.Column("resource_id", sa.String(128), nullable=False),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_until", TS, nullable=True),
        sa.Column("lease_epoch", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("route_id", sa.String(128), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("resource_id", name="pk_resources"),
        sa.CheckConstraint(f"state IN ({RESOURCE_STATES})", name="ck_resources_state"),
        sa.CheckConstraint("kind IN ('unit', 'route', 'credential')", name="ck_resources_kind"),
    )
    op.create_index("ix_resources_pool_state", "resources", ["pool", "state"])

    op.create_table(
        "resource_health",
        sa.Column("resource_id", sa.String(128), nullable=False),
        sa.Column("last_checked_at", TS, nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("consecutive_successes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("recent_timeouts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error_type", sa.String(64), nullable=True),
        sa.Column("cooldown_until", TS, nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("egress_ip", sa.String(64), nullable=True),
        sa.Column("egress_region", sa.String(16), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("resource_id", name="pk_resource_health"),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.resource_id"],
            name="fk_resource_health_resource_id_resources",
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "event_log",
        _id("event_id"),
        sa.Column("run_id", sa.String(26), nullable=True),
        sa.Column("resource_id", sa.String(128), nullable=True),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("level", sa.String(10), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_event_log"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_event_log_run_id_event_id", "event_log", ["run_id", "event_id"])
    op.create_index("ix_event_log_resource_id_event_id", "event_log", ["resource_id", "event_id"])
    op.create_index("ix_event_log_created_at", "event_log", ["created_at"])
    op.create_index("ix_event_log_event_type_created_at", "event_log", ["event_type", "created_at"])
    _event_log_append_only()

    op.create_table(
        "users",
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=True),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("roles_json", sa.Text(), nullable=False, server_default="[]"),
        sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("username", name="pk_users"),
    )

    op.create_table(
        "sessions",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("csrf_token", sa.String(128), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("last_seen_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
        sa.ForeignKeyConstraint(
            ["username"], ["users.username"], name="fk_sessions_username_users", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_sessions_username", "sessions", ["username"])

    op.create_table(
        "api_tokens",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False),
        sa.Column("username", sa.String(64), nullable=True),
        sa.Column("roles_json", sa.Text(), nullable=False, server_default="[]"),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("last_used_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_api_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
        sa.ForeignKeyConstraint(
            ["username"],
            ["users.username"],
            name="fk_api_tokens_username_users",
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "notification_log",
        _id(),
        sa.Column("event_key", sa.String(512), nullable=False),
        sa.Column("run_id", sa.String(26), nullable=True),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("recipient", sa.String(320), nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notification_log"),
        sa.UniqueConstraint("event_key", name="uq_notification_log_event_key"),
        sa.CheckConstraint("state IN ('SENT', 'FAILED')", name="ck_notification_log_state"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_notification_log_run_id", "notification_log", ["run_id"])


def _event_log_append_only() -> None:
    """Refuse UPDATE on the audit log in the database itself (retention may still DELETE)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE TRIGGER event_log_append_only BEFORE UPDATE ON event_log "
            "BEGIN SELECT RAISE(ABORT, 'event_log is append-only'); END"
        )
    else:
        op.execute(
            "CREATE FUNCTION cadenza_event_log_append_only() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'event_log is append-only'; END $$"
        )
        op.execute(
            "CREATE TRIGGER event_log_append_only BEFORE UPDATE ON event_log "
            "FOR EACH ROW EXECUTE FUNCTION cadenza_event_log_append_only()"
        )


def downgrade() -> None:
    for table in (
        "notification_log",
        "api_tokens",
        "sessions",
        "users",
        "event_log",
        "resource_health",
        "resources",
        "schedule_cursors",
        "operation_keys",
        "checkpoints",
        "run_logs",
        "step_runs",
        "runs",
    ):
        op.drop_table(table)
    if op.get_bind().dialect.name != "sqlite":
        op.execute("DROP FUNCTION IF EXISTS cadenza_event_log_append_only()")
