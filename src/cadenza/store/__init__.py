"""The durable store: SQLAlchemy Core tables, Alembic migrations and repositories.

``Store.open(url)`` gives one object over SQLite or PostgreSQL whose methods create runs,
step runs and resources, move them through their state machines with conditional UPDATEs
(each change and its audit events in one transaction), and read them back as frozen records.
Consumers type the store against the small protocol they use (:mod:`cadenza.store.protocols`:
``RunQueue``, ``RunControl``, ``RunLeases``, ``Resources``, ``AuditLog``, ``HistoryQueries``).

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
        AuditLog,
        EventQueries,
        HistoryQueries,
        Resources,
        RunControl,
        RunLeases,
        RunQueue,
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
    "AuditLog": "cadenza.store.protocols",
    "EventQueries": "cadenza.store.protocols",
    "HistoryQueries": "cadenza.store.protocols",
    "Resources": "cadenza.store.protocols",
    "RunControl": "cadenza.store.protocols",
    "RunLeases": "cadenza.store.protocols",
    "RunQueue": "cadenza.store.protocols",
}

__all__ = [
    "AuditLog",
    "EventQueries",
    "EventRecord",
    "HistoryQueries",
    "LogRecord",
    "NoRedaction",
    "Redactor",
    "ResourceHealthRecord",
    "ResourceRecord",
    "Resources",
    "RunControl",
    "RunLeases",
    "RunQueue",
    "RunRecord",
    "StaleEpoch",
    "StepRunRecord",
    "Store",
    "UserRecord",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
