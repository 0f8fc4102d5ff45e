"""The durable store: SQLAlchemy Core tables, Alembic migrations and repositories.

``Store.open(url)`` gives one object over SQLite or PostgreSQL whose methods create runs,
step runs and resources, move them through their state machines with conditional UPDATEs
(each change and its audit events in one transaction), and read them back as frozen records.
"""

from __future__ import annotations

from cadenza.domain.errors import StaleEpoch
from cadenza.store.core import NoRedaction, Redactor
from cadenza.store.records import (
    EventRecord,
    LogRecord,
    ResourceHealthRecord,
    ResourceRecord,
    RunRecord,
    StepRunRecord,
    UserRecord,
)
from cadenza.store.store import Store

__all__ = [
    "EventRecord",
    "LogRecord",
    "NoRedaction",
    "Redactor",
    "ResourceHealthRecord",
    "ResourceRecord",
    "RunRecord",
    "StaleEpoch",
    "StepRunRecord",
    "Store",
    "UserRecord",
]
