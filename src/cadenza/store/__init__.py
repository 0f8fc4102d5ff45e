"""The durable store: SQLAlchemy Core tables, Alembic migrations and repositories.

``Store.open(url)`` gives one object over SQLite or PostgreSQL whose methods create runs,
step runs and resources, move them through their state machines with conditional UPDATEs
(each change and its audit events in one transaction), and read them back as frozen records.
Consumers type the store against the small protocols they use (:mod:`cadenza.store.protocols`:
``RunQueue``, ``RunCommands``, ``RunLeases``, ``Resources``, ``AuditLog``, ``HistoryQueries``
...); what the store calls in its own transactions is :mod:`cadenza.store.hooks`.

The public names are imported lazily, so that light modules of the package (the plain values
of :mod:`cadenza.store.boundary`) can be imported without SQLAlchemy and Alembic, e.g. by a
step's child process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cadenza.domain.errors import StaleEpoch
    from cadenza.store.core import NoRedaction, Redactor
    from cadenza.store.protocols import (
        Accounts,
        Admission,
        AuditLog,
        Checkpoints,
        EventQueries,
        HistoryQueries,
        IdempotencyKeys,
        Maintenance,
        Resources,
        RunBoundaries,
        RunCommands,
        RunLeases,
        RunQueue,
        Schedules,
        Transactions,
    )
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

_EXPORTS = {
    "StaleEpoch": "cadenza.domain.errors",
    "NoRedaction": "cadenza.store.core",
    "Redactor": "cadenza.store.core",
    "EventRecord": "cadenza.store.records",
    "LogRecord": "cadenza.store.records",
    "ResourceHealthRecord": "cadenza.store.records",
    "ResourceRecord": "cadenza.store.records",
    "RunRecord": "cadenza.store.records",
    "StepRunRecord": "cadenza.store.records",
    "UserRecord": "cadenza.store.records",
    "Store": "cadenza.store.store",
    "Accounts": "cadenza.store.protocols",
    "Admission": "cadenza.store.protocols",
    "AuditLog": "cadenza.store.protocols",
    "Checkpoints": "cadenza.store.protocols",
    "EventQueries": "cadenza.store.protocols",
    "HistoryQueries": "cadenza.store.protocols",
    "IdempotencyKeys": "cadenza.store.protocols",
    "Maintenance": "cadenza.store.protocols",
    "Resources": "cadenza.store.protocols",
    "RunBoundaries": "cadenza.store.protocols",
    "RunCommands": "cadenza.store.protocols",
    "RunLeases": "cadenza.store.protocols",
    "RunQueue": "cadenza.store.protocols",
    "Schedules": "cadenza.store.protocols",
    "Transactions": "cadenza.store.protocols",
}

__all__ = [
    "Accounts",
    "Admission",
    "AuditLog",
    "Checkpoints",
    "EventQueries",
    "EventRecord",
    "HistoryQueries",
    "IdempotencyKeys",
    "LogRecord",
    "Maintenance",
    "NoRedaction",
    "Redactor",
    "ResourceHealthRecord",
    "ResourceRecord",
    "Resources",
    "RunBoundaries",
    "RunCommands",
    "RunLeases",
    "RunQueue",
    "RunRecord",
    "Schedules",
    "StaleEpoch",
    "StepRunRecord",
    "Store",
    "Transactions",
    "UserRecord",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
