"""``ldap_sync``: mirror LDAP entries into a SQL table, never deleting past a ratio."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from cadenza.config.types import NonEmptyStr, Ref, StrictModel, fail
from cadenza.steps.base import SqlConnectionName, StepConfig, TableName
from cadenza.steps.registry import StepType


def _filter(value: str) -> str:
    depth = 0
    for ch in value:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            break
    if not (value.startswith("(") and value.endswith(")")) or depth != 0:
        fail(f"expected an LDAP filter in balanced parentheses like '(objectClass=person)', "
             f"got {value!r}")
    return value


class LdapTarget(StrictModel):
    """The SQL table the entries are written to, and its ``key`` column."""

    connection: SqlConnectionName
    table: TableName
    key: NonEmptyStr


class LdapSyncConfig(StepConfig):
    """``connection`` (type ldap), search ``base``, ``scope`` and ``filter``; ``mapping``
    renames attributes to columns; ``delete`` says what happens to rows whose entry is gone;
    more than ``max_delete_ratio`` of the rows deleted at once aborts the step."""

    connection: Annotated[str, Ref("connection", "ldap")]
    base: NonEmptyStr
    target: LdapTarget
    scope: Literal["base", "one", "subtree"] = "subtree"
    filter: Annotated[str, AfterValidator(_filter)] = "(objectClass=*)"
    attributes: list[NonEmptyStr] = Field(default_factory=list)
    mapping: dict[str, NonEmptyStr] = Field(default_factory=dict)
    delete: Literal["none", "soft", "hard"] = "none"
    max_delete_ratio: float = Field(0.2, ge=0, le=1)


class LdapSyncStep(StepType):
    """Synchronise LDAP entries into a table (SPEC §4)."""

    name = "ldap_sync"
    Config = LdapSyncConfig
