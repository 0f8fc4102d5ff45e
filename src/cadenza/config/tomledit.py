"""Editing one job of a ``jobs.toml`` document in place, keeping comments and order.

:func:`set_job` merges the new values into the existing tables: a key whose value did not
change is not touched (its line, spacing and trailing comment stay byte-for-byte); a
changed value is replaced where it stands (its trailing comment stays); a removed key is
removed; a new key goes after the table's last key. Steps are matched by name, so a
reordered step keeps its comments. New jobs are appended at the end.

In tomlkit, the comment lines written just above a table header belong to the end of the
table before it. Both helpers therefore move that "tail" along, so that editing or
deleting job A never loses (or moves) the comment that introduces job B.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.items import AoT, Comment, InlineTable, Item, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from cadenza.config.types import ID_EXPECTED, ID_PATTERN

#: keys of a job written as their own ``[jobs.ID.KEY]`` table (or array of tables)
_JOB_TABLES = frozenset({"retry", "alerts", "presets", "steps"})


def set_job(doc: TOMLDocument, job_id: str, table: Mapping[str, Any]) -> None:
    """Create or replace the job ``job_id`` of ``doc`` with ``table`` (plain values, as in
    TOML), keeping every comment of the unchanged parts."""
    _check_id(job_id)
    jobs = _jobs_table(doc)
    if job_id in jobs:
        job = jobs[job_id]
        tail = _detach_tail(job)
        _merge(job, table, "job")
        _attach_tail(job, tail)
    else:
        jobs.append(job_id, _table(table, "job"))


def set_preset(doc: TOMLDocument, job_id: str, name: str, values: Mapping[str, Any]) -> None:
    """Create or replace the preset ``name`` of the job ``job_id`` (which must exist)."""
    _check_id(name)
    jobs = _jobs_table(doc)
    if job_id not in jobs:
        raise KeyError(f"no job {job_id!r} in this document")
    current = jobs[job_id].unwrap()
    presets = dict(current.get("presets", {}))
    presets[name] = dict(values)
    set_job(doc, job_id, {**current, "presets": presets})


def delete_job(doc: TOMLDocument, job_id: str) -> None:
    """Remove the job ``job_id`` (all its tables and the comment lines just above its
    header); the comments introducing the next job are kept."""
    jobs = _jobs_table(doc)
    if job_id not in jobs:
        raise KeyError(f"no job {job_id!r} in this document")
    ids = list(jobs.keys())
    position = ids.index(job_id)
    tail = _detach_tail(jobs[job_id])
    previous = jobs[ids[position - 1]] if position > 0 else None
    if previous is not None:
        kept = _detach_tail(previous)
        while kept and isinstance(kept[-1], Comment):
            kept.pop()  # the comment block just above the deleted header described it
        tail = _collapse([*kept, *tail], last=position + 1 == len(ids))
    del jobs[job_id]
    if previous is not None:
        _attach_tail(previous, tail)
    elif position + 1 < len(ids):
        header = _first_header(jobs[ids[position + 1]])
        while tail and isinstance(tail[0], Whitespace):
            tail.pop(0)  # what came before the deleted job already ends with its separator
        if header is not None:
            header.trivia.indent = "".join(i.as_string() for i in tail) + header.trivia.indent


def _check_id(name: str) -> None:
    if not ID_PATTERN.fullmatch(name):
        raise ValueError(f"invalid id {name!r}: {ID_EXPECTED}")


def _jobs_table(doc: TOMLDocument) -> Table:
    if "jobs" not in doc:
        doc.append("jobs", tomlkit.table(is_super_table=True))
    jobs = doc["jobs"]
    if not isinstance(jobs, Table):
        raise ValueError("'jobs' is not a table in this document")
    return jobs


# -- building new items -----------------------------------------------------------------
def _item(key: str, value: Any, level: str) -> Item:
    if isinstance(value, Mapping):
        if level == "job" and key == "presets":
            presets = tomlkit.table(is_super_table=True)
            for name, preset in value.items():
                presets.append(name, _table(preset, "preset"))
            return presets
        if level == "job" and key in _JOB_TABLES:
            return _table(value, key)
        return _inline(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        if level == "job" and key == "steps":
            steps = tomlkit.aot()
            for step in value:
                steps.append(_table(step, "step"))
            return steps
        array = tomlkit.array()
        for element in value:
            array.append(_inline(element) if isinstance(element, Mapping) else _value(element))
        if len(array.as_string()) > 80:
            array.multiline(True)
        return array
    return _value(value)


def _value(value: Any) -> Item:
    if isinstance(value, str) and "\n" in value:
        return tomlkit.string(value, multiline=True)
    item: Item = tomlkit.item(value)
    return item


def _inline(value: Mapping[str, Any]) -> InlineTable:
    table = tomlkit.inline_table()
    for key, item in value.items():
        table.append(key, _inline(item) if isinstance(item, Mapping) else _item(key, item, ""))
    return table


def _table(values: Mapping[str, Any], level: str) -> Table:
    table = tomlkit.table()
    for key, value in values.items():
        table.append(key, _item(key, value, level))
    return table


# -- merging into existing items --------------------------------------------------------
def _merge(table: Table | InlineTable, values: Mapping[str, Any], level: str) -> None:
    for key in [k for k in table if k not in values]:
        del table[key]
    for key, value in values.items():
        if key not in table:
            _add(table, key, _item(key, value, level))
            continue
        current = table[key]
        if _plain(current) == _plain(value):
            continue
        if isinstance(current, Table) and isinstance(value, Mapping):
            sub = "preset" if key == "presets" else key if level == "job" else level
            if key == "presets":
                _merge_presets(current, value)
            else:
                _merge(current, value, sub)
        elif isinstance(current, AoT) and _is_tables(value):
            _merge_steps(table, key, current, value)
        else:
            table[key] = _item(key, value, level)


def _merge_presets(presets: Table, values: Mapping[str, Any]) -> None:
    for name in [k for k in presets if k not in values]:
        del presets[name]
    for name, preset in values.items():
        current = presets.get(name)
        if isinstance(current, Table) and isinstance(preset, Mapping):
            _merge(current, preset, "preset")
        else:
            presets[name] = _table(preset, "preset")


def _merge_steps(parent: Table | InlineTable, key: str, steps: AoT,
                 values: Sequence[Mapping[str, Any]]) -> None:
    old: dict[object, Table] = {t.get("name"): t for t in steps.body}
    names = [v.get("name") for v in values]
    if names == [t.get("name") for t in steps.body]:
        for table, value in zip(steps.body, values, strict=True):
            _merge(table, value, "step")
        return
    tables: list[Table] = []
    for value in values:
        reused = old.pop(value.get("name"), None)
        if reused is None:
            table = _table(value, "step")
        else:
            table = reused
            _merge(table, value, "step")
            body = table.value.body
            while body and body[-1][0] is None and isinstance(body[-1][1], Whitespace):
                body.pop()  # the blank line that separated it from its old neighbour
        tables.append(table)
    rebuilt = tomlkit.aot()
    for table in tables:
        rebuilt.append(table)  # tomlkit puts one blank line between the tables
    parent[key] = rebuilt


def _add(table: Table | InlineTable, key: str, item: Item) -> None:
    """Append ``key``: tables at the end, plain values right after the last plain value."""
    if isinstance(item, Table | AoT) or isinstance(table, InlineTable):
        table.append(key, item)
        return
    container: Container = table.value
    last = None
    for k, v in container.body:
        if k is not None and not isinstance(v, Table | AoT):
            last = k
    if last is None:
        table.append(key, item)
    else:
        container._insert_after(last, key, item)


def _plain(value: Any) -> Any:
    return value.unwrap() if isinstance(value, Item) else value


def _is_tables(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) \
        and all(isinstance(v, Mapping) for v in value)


# -- the comment lines between one job and the next --------------------------------------
def _last_table(table: Table) -> Table:
    """The table rendered last within ``table`` (where trailing comments are kept)."""
    for key, item in reversed(table.value.body):
        if key is None:
            continue
        if isinstance(item, Table) and not key.is_dotted():
            return _last_table(item)
        if isinstance(item, AoT) and item.body:
            return _last_table(item.body[-1])
        return table
    return table


def _detach_tail(table: Table) -> list[Item]:
    """Remove and return the comments and blank lines that end ``table``."""
    body = _last_table(table).value.body
    tail: list[Item] = []
    while body and body[-1][0] is None and isinstance(body[-1][1], Comment | Whitespace):
        tail.insert(0, body.pop()[1])
    return tail


def _collapse(items: list[Item], *, last: bool) -> list[Item]:
    """Blank lines merged into one; none at the end of the file."""
    out: list[Item] = []
    for item in items:
        if isinstance(item, Whitespace) and out and isinstance(out[-1], Whitespace):
            continue
        out.append(item)
    while last and out and isinstance(out[-1], Whitespace):
        out.pop()
    return out


def _attach_tail(table: Table, tail: list[Item]) -> None:
    last = _last_table(table)
    for item in tail:
        last.value.body.append((None, item))


def _first_header(item: Item) -> Table | None:
    """The first table of ``item`` that renders a ``[header]``."""
    if isinstance(item, AoT):
        return item.body[0] if item.body else None
    if not isinstance(item, Table):
        return None
    if not item.is_super_table():
        return item
    for key, child in item.value.body:
        if key is not None and isinstance(child, Table | AoT):
            return _first_header(child)
    return None
