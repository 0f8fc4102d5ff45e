"""Store implements every consumer protocol of store/protocols.py (mypy proves it in
store/store.py; this checks it at runtime, parameter by parameter)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from cadenza.store import Store
from cadenza.store.protocols import PROTOCOLS, AuditLog, HistoryQueries, RunLeases


def _members(protocol: type[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for klass in reversed(protocol.__mro__):
        if klass.__module__ == "cadenza.store.protocols":
            found.update({name: value for name, value in vars(klass).items()
                          if (callable(value) or isinstance(value, property))
                          and not name.startswith("_")})
    return found


def _shape(function: Any) -> list[tuple[str, Any, bool]]:
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_store_has_every_method_of_the_protocol_with_its_parameters(protocol: type) -> None:
    members = _members(protocol)
    assert members, f"{protocol.__name__} declares no method"
    for name, declared in members.items():
        implemented = getattr(Store, name, None)
        if isinstance(declared, property):  # a property or a cached one
            assert implemented is not None, f"Store lacks {protocol.__name__}.{name}"
            continue
        assert callable(implemented), f"Store lacks {protocol.__name__}.{name}"
        assert _shape(implemented) == _shape(declared), f"{protocol.__name__}.{name}"


def test_the_read_protocol_writes_nothing_and_the_lease_protocol_speaks_run_lease() -> None:
    reads = _members(HistoryQueries)
    assert not [n for n in reads if n.startswith(("create", "append", "transition", "request"))]
    assert set(_members(AuditLog)) == {"append_event", "list_events"}
    assert {"renew_run_leases", "reap_expired_run_leases"} <= set(_members(RunLeases))


COMPOSITION = {"open", "use_hooks", "emit_events", "extends_resource_leases"}
"""What only the assembly and the opening of a store use (cadenza.assembly, Store.open):
the hooks table, and how a hook writes with the store's events and run leases."""


def test_the_stores_public_surface_is_what_the_protocols_list() -> None:
    declared: set[str] = set()
    for protocol in PROTOCOLS:
        for klass in protocol.__mro__:
            if klass.__module__ == "cadenza.store.protocols":
                declared |= {n for n in [*vars(klass), *getattr(klass, "__annotations__", {})]
                             if not n.startswith("_")}
    declared.add("hooks")  # Hooked's attribute (an instance attribute of the store)
    public = {name for name in dir(Store) if not name.startswith("_")}
    assert public - declared - COMPOSITION == set()
    assert COMPOSITION <= public
