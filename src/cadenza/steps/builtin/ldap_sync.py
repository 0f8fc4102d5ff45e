"""``ldap_sync``: mirror LDAP entries into a SQL table, never deleting past a ratio.

The step (docs/ldap_sync.md):

1. binds to the ``connection`` of cadenza.toml (:mod:`cadenza.steps.builtin.lib.ldapsearch`:
   ldaps or StartTLS, a refused bind is :class:`Fatal`: no retry);
2. reads the target table's rows (key → values) and searches the directory page by page
   (simple paged results control). Each entry becomes a row: ``mapping`` renames
   attributes to columns, ``dn`` is the entry's DN, multi-valued attributes are joined
   with ``;`` (sorted) or kept as a JSON list (``multi_valued = "json"``), binary ones are
   base64. New keys are inserted and changed rows updated in batches of ``batch_size``,
   one transaction per batch, each followed by a checkpoint of the counts so far;
3. only once the search is complete: the rows whose entry is gone are deleted (``hard``),
   marked with ``deleted_at`` (``soft``), or left (``none``). When they are more than
   ``max_delete_ratio`` of the table's live rows the step FAILS and deletes nothing: a
   directory answering with too few entries (an outage, a wrong base, a broken ACL) must
   never empty the table. The deletes are one transaction.

A resumed attempt (retry, crash) searches again from the start (an LDAP paging cookie does
not outlive its connection); the rows an earlier attempt committed are then unchanged, so
they are not written twice, and the counts of the checkpoint are added to the new ones.

Output: ``{"fetched", "inserted", "updated", "deleted", "unchanged", "missing",
"skipped", "pages", "table", "delete"}``; ``rows`` is inserted + updated + deleted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from pydantic import AfterValidator, Field, model_validator

from cadenza.config.labels import ADVANCED
from cadenza.config.schema_settings import LdapConnection
from cadenza.config.types import NonEmptyStr, Ref, StrictModel, fail
from cadenza.domain.errors import Fatal
from cadenza.domain.params import ParamError, Scope, find_tokens, lookup
from cadenza.steps.base import RUN_TUNABLE, SqlConnectionName, StepConfig, TableName
from cadenza.steps.builtin.lib import sqlutil
from cadenza.steps.builtin.lib.ldapsearch import (
    Directory,
    Entry,
    escape_rdn,
    render_filter,
    text_of,
)
from cadenza.steps.registry import StepType
from cadenza.steps.runtime import StepContext, StepResult, clock_of

DN = "dn"
"""The pseudo-attribute holding an entry's DN (``mapping = { dn = "dn" }``)."""
DELETED_AT = "deleted_at"
"""The column that ``delete = "soft"`` sets on rows whose entry is gone."""
DELETE_CHUNK = 500


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

    connection: SqlConnectionName = Field(description=(
        "The SQL connection of the table, e.g. warehouse."))
    table: TableName = Field(description="The table the entries go to, e.g. people.")
    key: NonEmptyStr = Field(title="Key column", description=(
        "The column that identifies an entry, e.g. uid."))


class LdapSyncConfig(StepConfig):
    """``connection`` (type ldap), search ``base``, ``scope`` and ``filter``; ``mapping``
    renames attributes to columns; ``delete`` says what happens to rows whose entry is gone;
    more than ``max_delete_ratio`` of the rows deleted at once aborts the step."""

    connection: Annotated[str, Ref("connection", "ldap")] = Field(description=(
        "An ldap connection of cadenza.toml, e.g. directory."))
    base: NonEmptyStr = Field(title="Search base", description=(
        "Where the search starts, e.g. ou=people,dc=example,dc=org."))
    target: LdapTarget = Field(description="The SQL table the entries are written to.")
    scope: Literal["base", "one", "subtree"] = Field("subtree", description=(
        "The base entry only, its children, or the whole subtree."))
    filter: Annotated[str, AfterValidator(_filter)] = Field("(objectClass=*)", description=(
        "An LDAP filter, e.g. (objectClass=person)."))
    attributes: list[NonEmptyStr] = Field(default_factory=list, description=(
        "The attributes read, e.g. uid, mail (default: all)."))
    mapping: dict[str, NonEmptyStr] = Field(default_factory=dict, description=(
        "Attribute = column, one per line, e.g. mail = \"email\"."))
    delete: Literal["none", "soft", "hard"] = Field("none", title="Gone entries",
                                                   description=(
        "Rows whose entry is gone: kept (none), marked deleted (soft) or deleted (hard)."))
    max_delete_ratio: float = Field(0.2, ge=0, le=1, json_schema_extra=ADVANCED, description=(
        "The step stops rather than delete more than this share of the rows, e.g. 0.2."))
    multi_valued: Literal["join", "json"] = Field("join", json_schema_extra=ADVANCED,
                                                 description=(
        "An attribute with several values is written joined or as a JSON list."))
    page_size: int = Field(500, ge=1, le=100_000, json_schema_extra=ADVANCED | RUN_TUNABLE,
                           description="Entries read per page of the search.")
    batch_size: int = Field(1000, ge=1, le=1_000_000, json_schema_extra=ADVANCED | RUN_TUNABLE,
                            description="Rows written per batch.")

    @model_validator(mode="after")
    def _columns(self) -> LdapSyncConfig:
        plan = column_plan(self)
        columns = [c.lower() for _, c in plan]
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:
            fail(f"mapping: column {twice[0]!r} is written by more than one attribute")
        if plan and self.target.key.lower() not in columns:
            fail(f"target.key {self.target.key!r} is not among the columns written "
                 f"({', '.join(c for _, c in plan)}); map an attribute to it")
        if DELETED_AT in columns:
            fail(f"the column {DELETED_AT!r} is the step's own (delete = 'soft'); map the "
                 "attribute to another name")
        return self


def column_plan(config: LdapSyncConfig) -> list[tuple[str, str]]:
    """(attribute, column) pairs: each of ``attributes`` then each other key of
    ``mapping``, renamed by ``mapping`` (attribute names are case-insensitive). Empty when
    neither is given: the target table's columns then choose the attributes."""
    renames = {a.lower(): c for a, c in config.mapping.items()}
    attrs = list(dict.fromkeys(config.attributes))
    lowered = {a.lower() for a in attrs}
    attrs += [a for a in config.mapping if a.lower() not in lowered]
    return [(a, renames.get(a.lower(), a)) for a in attrs]


def render_base(template: str, scope: Scope) -> str:
    """``base`` with its tokens resolved: a token that is the whole value is a DN, taken as
    it is; a token inside a longer DN is one RDN value, escaped as RFC 4514 asks (so that
    ``, + \\ #`` in a parameter cannot add or change a DN component)."""
    tokens = find_tokens(template)
    try:
        if len(tokens) == 1 and tokens[0].start == 0 and tokens[0].end == len(template):
            return str(lookup(tokens[0], scope))
        out, last = [], 0
        for token in tokens:
            out.append(template[last:token.start])
            value = lookup(token, scope)
            out.append(escape_rdn("" if value is None else str(value)))
            last = token.end
    except ParamError as exc:
        raise Fatal(f"base: {exc}") from None
    out.append(template[last:])
    return "".join(out).replace("$${", "${")


class LdapSyncStep(StepType):
    """Synchronise LDAP entries into a table (docs/ldap_sync.md)."""

    name = "ldap_sync"
    Config = LdapSyncConfig
    raw_fields = frozenset({"filter", "base"})

    def run(self, ctx: StepContext, config: LdapSyncConfig) -> StepResult:
        """Bind, search, write, delete; see the module's docstring."""
        definition = _definition(ctx, config.connection)
        filter_ = render_filter(config.filter, ctx.scope)
        base = render_base(config.base, ctx.scope)
        ctx.log.info("ldap_sync %s (%s, %s) into %s", base, config.scope, filter_,
                     config.target.table)
        engine = ctx.sql_engine(config.target.connection)
        directory = Directory(config.connection, definition, min(
            definition.timeout.total_seconds(), max(ctx.remaining(), 1.0)))
        with directory, sqlutil.transaction(
                engine, ctx, f"ldap_sync into {config.target.table}") as (conn, guard):
            sync = _Sync(ctx, config, conn, guard, directory)
            return sync.run(base, filter_)


def _definition(ctx: StepContext, name: str) -> LdapConnection:
    try:
        definition = ctx.settings.connections[name]
    except KeyError:
        known = ", ".join(ctx.settings.connections) or "none"
        raise Fatal(f"unknown connection {name!r} (defined: {known})") from None
    if not isinstance(definition, LdapConnection):
        raise Fatal(f"connection {name!r} is of type {definition.type!r}, not ldap")
    if definition.ca_file and not Path(definition.ca_file).is_absolute():
        definition = definition.model_copy(
            update={"ca_file": str(Path(ctx.home) / definition.ca_file)})
    return definition


@dataclass
class _Counts:
    fetched: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    skipped: int = 0
    pages: int = 0
    batches: int = 0
    earlier: dict[str, int] = field(default_factory=dict)

    def total(self, name: str) -> int:
        """This attempt's count plus what earlier attempts committed (their checkpoint)."""
        return int(getattr(self, name)) + int(self.earlier.get(name, 0))


@dataclass
class _Old:
    values: tuple[str | None, ...]
    deleted: bool


class _Sync:
    """One synchronisation, on one SQL connection (a transaction per batch)."""

    def __init__(self, ctx: StepContext, config: LdapSyncConfig, conn: sa.Connection,
                 guard: sqlutil.Guard, directory: Directory) -> None:
        self.ctx, self.config, self.conn, self.guard = ctx, config, conn, guard
        self.directory = directory
        self.soft = config.delete == "soft"
        self.counts = _Counts()
        saved = ctx.last_checkpoint if callable(getattr(ctx, "checkpoint", None)) else None
        if isinstance(saved, dict) and saved.get("ldap_sync") == config.target.table:
            self.counts.earlier = {k: int(v) for k, v in saved.items()
                                   if k in ("inserted", "updated", "deleted")}
        self.plan: list[tuple[str, str]] = []
        self.columns: list[str] = []
        self.key_index = 0
        self.table: Any = None
        self.pending: list[tuple[str, dict[str, Any], bool]] = []
        self.binary: dict[str, bool] = {}  # by attribute name, from the schema

    # -- the table --------------------------------------------------------------------

    def prepare(self) -> None:
        """The columns to write; the table created when missing, or checked."""
        config, conn = self.config, self.conn
        name = config.target.table
        plan = column_plan(config)
        if sqlutil.exists(conn, name):
            existing = sqlutil.columns_of(conn, name)
            by_fold = {c.lower(): c for c in existing}
            if not plan:  # no attributes nor mapping: the table's columns choose them
                plan = [(c, c) for c in existing if c.lower() != DELETED_AT]
            missing = [c for _, c in plan if c.lower() not in by_fold]
            if missing:
                raise Fatal(f"table {name} has no column {missing[0]!r} (columns: "
                            f"{', '.join(existing)}); add it, or change 'mapping'")
            if self.soft and DELETED_AT not in by_fold:
                raise Fatal(f"delete = 'soft' marks gone entries in a {DELETED_AT!r} column, "
                            f"which table {name} lacks; add it (a timestamp) or use "
                            "delete = 'hard'")
            if config.target.key.lower() not in by_fold:
                raise Fatal(f"table {name} has no key column {config.target.key!r}")
            plan = [(a, by_fold[c.lower()]) for a, c in plan]
            key = by_fold[config.target.key.lower()]
        else:
            if not plan:
                raise Fatal(f"table {name} does not exist and neither 'attributes' nor "
                            "'mapping' say which columns to create; give one of them")
            key = next(c for _, c in plan if c.lower() == config.target.key.lower())
            columns = {c: "text" for _, c in plan}
            if self.soft:
                columns[DELETED_AT] = "timestamptz"
            sql = sqlutil.create_table(conn, name, columns, [key])
            self.ctx.log.debug("created %s: %s", name, sql)
            sqlutil.recommit(conn, self.guard, self.ctx)
        self.plan = plan
        self.columns = [c for _, c in plan]
        self.key_index = self.columns.index(key)
        schema, bare = sqlutil.split_table(name)
        cols: list[sa.ColumnClause[Any]] = [sa.column(c) for c in self.columns]
        if self.soft:
            cols.append(sa.column(DELETED_AT, sa.DateTime(timezone=True)))
        self.table = sa.table(bare, *cols, schema=schema)

    def existing(self) -> dict[str, _Old]:
        """The table's rows: key → values (as text) and whether soft-deleted."""
        t = self.table
        select = [t.c[c] for c in self.columns]
        if self.soft:
            select.append(t.c[DELETED_AT])
        rows: dict[str, _Old] = {}
        width = len(self.columns)
        for row in self.conn.execute(sa.select(*select)):
            values = tuple(None if v is None else str(v) for v in row[:width])
            key = values[self.key_index]
            if key is not None:
                rows[key] = _Old(values, self.soft and row[width] is not None)
        return rows

    # -- the sync ---------------------------------------------------------------------

    def run(self, base: str, filter_: str) -> StepResult:
        config, counts = self.config, self.counts
        self.prepare()
        old = self.existing()
        live = sum(1 for o in old.values() if not o.deleted)
        attributes = [a for a, _ in self.plan if a.lower() != DN]
        if self.plan and not attributes:
            attributes = ["1.1"]  # only the DN (RFC 4511: no attributes)
        unknown = self.directory.unknown(attributes)
        if unknown:
            raise Fatal(f"attribute {unknown[0]!r} is not in the directory's schema (check "
                        "'attributes' and 'mapping'; names are case-insensitive)")
        seen: dict[str, str] = {}
        for page in self.directory.search(base, config.scope, filter_, attributes,
                                          config.page_size):
            counts.pages += 1
            for entry in page:
                counts.fetched += 1
                self._entry(entry, old, seen)
                if len(self.pending) >= config.batch_size:
                    self._flush()
            self.guard.check(self.ctx)  # canceled or out of time: stop between pages
        self._flush()
        # the search is complete: only now may rows be deleted
        gone = [k for k, o in old.items() if k not in seen and not o.deleted]
        if gone and config.delete != "none":
            self._delete(gone, live)
        elif gone:
            self.ctx.log.info("%s rows have no entry any more; kept (delete = 'none')",
                              len(gone))
        output: dict[str, Any] = {
            "fetched": counts.fetched, "inserted": counts.total("inserted"),
            "updated": counts.total("updated"), "deleted": counts.total("deleted"),
            "unchanged": counts.unchanged, "missing": len(gone), "skipped": counts.skipped,
            "pages": counts.pages, "table": config.target.table, "delete": config.delete}
        self.ctx.log.info("ldap_sync: %s entries fetched in %s pages; %s inserted, %s updated, "
                          "%s deleted (%s), %s unchanged", counts.fetched, counts.pages,
                          output["inserted"], output["updated"], output["deleted"],
                          config.delete, counts.unchanged)
        rows = output["inserted"] + output["updated"] + output["deleted"]
        return StepResult(int(rows), output)

    def _entry(self, entry: Entry, old: dict[str, _Old], seen: dict[str, str]) -> None:
        values = self._row(entry)
        key = values[self.key_index]
        if key is None:
            self.counts.skipped += 1
            if self.counts.skipped <= 5:
                self.ctx.log.warning("%s has no %r (the key); skipped", entry.dn,
                                     self.config.target.key)
            return
        if key in seen:
            raise Fatal(f"entries {seen[key]!r} and {entry.dn!r} have the same key {key!r} "
                        f"({self.config.target.key}); the table can hold only one of them. "
                        "Nothing was deleted")
        seen[key] = entry.dn
        before = old.get(key)
        if before is None:
            self.pending.append((key, self._as_dict(values), True))
        elif before.values != values or before.deleted:
            self.pending.append((key, self._as_dict(values), False))
        else:
            self.counts.unchanged += 1

    def _row(self, entry: Entry) -> tuple[str | None, ...]:
        by_fold = {name.lower(): (name, vals) for name, vals in entry.values.items()}
        out: list[str | None] = []
        for attr, column in self.plan:
            if attr.lower() == DN:
                out.append(entry.dn)
                continue
            found = by_fold.get(attr.lower())
            if not found or not found[1]:
                out.append(None)
                continue
            name, raw = found
            binary = self.binary.get(name)
            if binary is None:
                binary = self.binary[name] = self.directory.binary(name)
            texts = sorted(text_of(v, binary) for v in raw)
            is_key = column == self.columns[self.key_index]
            if is_key and len(texts) > 1:
                raise Fatal(f"{entry.dn}: the key attribute {name!r} has {len(texts)} values "
                            f"({', '.join(texts[:3])}); a key must have one")
            if self.config.multi_valued == "json" and not is_key and not self._single(name):
                out.append(json.dumps(texts, ensure_ascii=False))
            else:
                out.append(";".join(texts))
        return tuple(out)

    def _single(self, attribute: str) -> bool:
        types = getattr(self.directory.schema, "attribute_types", None)
        info = types[attribute] if types is not None and attribute in types else None
        return bool(info is not None and info.single_value)

    def _as_dict(self, values: tuple[str | None, ...]) -> dict[str, Any]:
        row: dict[str, Any] = {f"v{i}": v for i, v in enumerate(values)}
        if self.soft:
            row["v_deleted"] = None
        return row

    def _flush(self) -> None:
        """Write the pending rows in one transaction, then checkpoint the counts."""
        if not self.pending:
            return
        t, key = self.table, self.columns[self.key_index]
        names: dict[str, Any] = {c: sa.bindparam(f"v{i}") for i, c in enumerate(self.columns)}
        if self.soft:
            names[DELETED_AT] = sa.bindparam("v_deleted")
        inserts = [row for _, row, new in self.pending if new]
        updates = [row for _, row, new in self.pending if not new]
        if inserts:
            self.conn.execute(t.insert().values(names), inserts)
        if updates:
            changed = {c: p for c, p in names.items() if c != key}
            if changed:
                self.conn.execute(t.update().where(
                    t.c[key] == sa.bindparam(f"v{self.key_index}")).values(changed), updates)
        sqlutil.recommit(self.conn, self.guard, self.ctx)
        self.counts.inserted += len(inserts)
        self.counts.updated += len(updates)
        self.counts.batches += 1
        self.pending = []
        self._checkpoint()

    def _checkpoint(self) -> None:
        if callable(getattr(self.ctx, "checkpoint", None)):
            self.ctx.checkpoint({"ldap_sync": self.config.target.table,
                                 **{k: self.counts.total(k)
                                    for k in ("inserted", "updated", "deleted")},
                                 "fetched": self.counts.fetched,
                                 "batches": self.counts.batches})

    def _delete(self, gone: list[str], live: int) -> None:
        """Delete (or mark) the rows whose entry is gone, unless they are too many."""
        config, table = self.config, self.config.target.table
        ratio = len(gone) / live if live else 1.0
        if ratio > config.max_delete_ratio:
            self.ctx.event("LDAP_SYNC_ABORTED", f"{table}: {len(gone)} of {live} rows have "
                           "no entry any more; nothing deleted",
                           {"table": table, "gone": len(gone), "live": live,
                            "max_delete_ratio": config.max_delete_ratio}, level="WARNING")
            raise Fatal(
                f"ldap_sync into {table}: {len(gone)} of the table's {live} rows "
                f"({ratio:.1%}) have no entry in the directory any more, more than "
                f"max_delete_ratio = {config.max_delete_ratio} ({config.max_delete_ratio:.0%}); "
                f"nothing was deleted (delete = '{config.delete}'). Check the directory (an "
                "outage, a wrong base or filter, missing read rights) or raise max_delete_ratio")
        t, key = self.table, self.columns[self.key_index]
        now = clock_of(self.ctx).now()
        for chunk in _chunks(gone, DELETE_CHUNK):
            where = t.c[key].in_(chunk)
            if config.delete == "hard":
                self.conn.execute(t.delete().where(where))
            else:
                self.conn.execute(t.update().where(where, t.c[DELETED_AT].is_(None))
                                  .values({DELETED_AT: now}))
        sqlutil.recommit(self.conn, self.guard, self.ctx)
        self.counts.deleted += len(gone)
        self._checkpoint()
        self.ctx.log.info("%s rows without an entry %s", len(gone),
                          "deleted" if config.delete == "hard" else f"marked {DELETED_AT}")


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
