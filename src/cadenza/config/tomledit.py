"""Editing one job of a ``jobs.toml`` document in place, keeping comments and order.

:func:`set_job` merges the new values into the existing tables: a key whose value did not
change is not touched (its line, spacing and trailing comment stay byte-for-byte); a
changed value is replaced where it stands (its trailing comment stays; an inline table
keeps its spacing, an array its layout); a removed key is removed; a new key goes after
the table's last key, written in the same style (``a = 1`` or ``a=1``); a new table goes
after the table's last table. Steps are matched by name (a renamed step by its place), so
a reordered step keeps its comments, and the comment lines just above its header move
with it. New jobs are appended at the end.

The comment lines written just above a table's header belong, in tomlkit, to the end of
the table before it (its *tail*). Every edit moves that tail along, so that editing or
deleting job A never loses or moves the comment that introduces job B.

Only tomlkit's public API is used; how the tables are rebuilt is in
:mod:`cadenza.config.tomlbody`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import tomlkit
from tomlkit.items import (
    AoT,
    Array,
    Comment,
    InlineTable,
    Item,
    Key,
    SingleKey,
    String,
    Table,
    Trivia,
    Whitespace,
)
from tomlkit.toml_document import TOMLDocument

from cadenza.config import tomlbody as tb
from cadenza.config.types import ID_EXPECTED, ID_PATTERN

#: keys of a job written as their own ``[jobs.ID.KEY]`` table (or array of tables)
_JOB_TABLES = frozenset({"retry", "alerts", "presets", "steps"})


def set_job(doc: TOMLDocument, job_id: str, table: Mapping[str, Any]) -> None:
    """Create or replace the job ``job_id`` of ``doc`` with ``table`` (plain values, as in
    TOML), keeping every comment of the unchanged parts. ValueError (``doc`` left in an
    unknown state) when the result would not read back as exactly that change."""
    _check_id(job_id)
    before = _others(doc, job_id)
    try:
        key, jobs = _root_jobs(doc)
        body = [] if jobs is None else tb.entries(jobs)
        if not tb.unique_keys(body):
            raise tb.Unsupported("a job split in parts")
        index = _index(body, job_id)
        if index is None:
            above = body or [e for e in tb.entries(doc) if e[0] is None or e[0].key != "jobs"]
            tb.end_line(above)
            item = _new_job(table, separate=bool(above) and not tb.ends_with_blank_line(above))
            body.append((tomlkit.key(job_id), item))
        else:
            body[index] = (body[index][0], _edited_job(body[index][1], table))
        new_jobs = tb.table_with(jobs, body) if jobs is not None else \
            Table(tb.container(body), Trivia(), False, True, name="jobs")
        tb.replace_in_root(doc, key or tomlkit.key("jobs"), new_jobs)
    except tb.Unsupported:
        _set_plainly(doc, job_id, table)
    _verify(doc, before, job_id, table)


def set_preset(doc: TOMLDocument, job_id: str, name: str, values: Mapping[str, Any]) -> None:
    """Create or replace the preset ``name`` of the job ``job_id`` (which must exist)."""
    _check_id(name)
    jobs = doc.get("jobs")
    if not isinstance(jobs, Mapping) or job_id not in jobs:
        raise KeyError(f"no job {job_id!r} in this document")
    current = jobs[job_id].unwrap()
    presets = dict(current.get("presets", {}))
    presets[name] = dict(values)
    set_job(doc, job_id, {**current, "presets": presets})


def delete_job(doc: TOMLDocument, job_id: str) -> None:
    """Remove the job ``job_id`` (all its tables and the comment lines just above its
    header); the comments introducing the next job are kept."""
    before = _others(doc, job_id)
    try:
        _delete(doc, job_id)
    except tb.Unsupported:
        jobs = doc.get("jobs")
        if not isinstance(jobs, MutableMapping) or job_id not in jobs:
            raise KeyError(f"no job {job_id!r} in this document") from None
        del jobs[job_id]
    _verify(doc, before, job_id, None)


def _delete(doc: TOMLDocument, job_id: str) -> None:
    key, jobs = _root_jobs(doc)
    body = [] if jobs is None else tb.entries(jobs)
    index = _index(body, job_id)
    if jobs is None or key is None or index is None:
        raise KeyError(f"no job {job_id!r} in this document")
    _, tail = tb.split_item_tail(body.pop(index)[1])
    last = all(k is None for k, _ in body[index:])
    previous = next((i for i in range(index - 1, -1, -1) if body[i][0] is not None), None)
    before: list[Item] = []
    if previous is not None and tb.is_section(*body[previous]):
        held, kept = tb.split_item_tail(body[previous][1])
        tb.trailing_comments(kept)  # the comment block just above the deleted header
        holder = tb.item_with_tail(held, tb.collapse([*kept, *tail], last=last))
        body[previous] = (body[previous][0], held if holder is None else holder)
    else:  # the first job: the comment block just above it is in [jobs] or the root
        start = index
        while start and body[start - 1][0] is None and isinstance(body[start - 1][1], Comment):
            start -= 1
        del body[start:index]
        index = start
        if jobs.is_super_table():
            root = tb.entries(doc)
            above = [item for _, item in root[:next(i for i, (k, _) in enumerate(root)
                                                    if k is not None and k == key)]]
            tb.blank_out(tb.trailing_comments(above))
        while tail and isinstance(tail[0], Whitespace):
            tail.pop(0)  # what comes before the deleted job already ends with its separator
        if not last and jobs.is_super_table():
            before = tail  # the next job's header is the first line of the jobs table
        elif not last:
            body[index:index] = [(None, item) for item in tail]
    tb.replace_in_root(doc, key, tb.table_with(jobs, body), before=before)


# -- the jobs table ---------------------------------------------------------------------
def _others(doc: TOMLDocument, job_id: str) -> dict[str, Any] | None:
    """What the document holds besides the job ``job_id`` (None: tomllib cannot read it)."""
    try:
        return _without(tomllib.loads(doc.as_string()), job_id)[0]
    except tomllib.TOMLDecodeError:
        return None


def _without(data: dict[str, Any], job_id: str) -> tuple[dict[str, Any], Any]:
    """``data`` without the job ``job_id`` (nor an empty ``jobs``), and that job."""
    jobs = data.get("jobs")
    job = jobs.pop(job_id, None) if isinstance(jobs, dict) else None
    if jobs == {}:
        del data["jobs"]
    return data, job


def _verify(doc: TOMLDocument, before: dict[str, Any] | None, job_id: str,
            table: Mapping[str, Any] | None) -> None:
    """Read the edited document back: the job is ``table`` (or gone), the rest as before.
    This guards the layouts that tomlkit itself writes wrongly (dotted keys in older
    versions)."""
    if before is None:
        return
    try:
        after, written = _without(tomllib.loads(doc.as_string()), job_id)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"the change of job {job_id!r} would not be valid TOML: {exc}") \
            from None
    wanted = None if table is None else tomllib.loads(tomlkit.dumps({"job": table}))["job"]
    if written != wanted or after != before:
        raise ValueError(f"job {job_id!r} is written in jobs.toml in a way this change "
                         "cannot keep (dotted keys, or its tables split apart); edit its "
                         "text instead")


def _check_id(name: str) -> None:
    if not ID_PATTERN.fullmatch(name):
        raise ValueError(f"invalid id {name!r}: {ID_EXPECTED}")


def _root_jobs(doc: TOMLDocument) -> tuple[Key | None, Table | None]:
    """The root entry ``jobs`` (None, None when there is none); Unsupported when it is
    not one table written with headers, and ValueError when it is not a table at all."""
    found = [(key, item) for key, item in tb.entries(doc)
             if key is not None and key.key == "jobs"]
    if not found:
        return None, None
    key, item = found[0]
    if not isinstance(item, Table | InlineTable):
        raise ValueError("'jobs' is not a table in this document")
    if len(found) > 1 or not isinstance(item, Table) or key.is_dotted():
        raise tb.Unsupported("jobs written in parts, inline or with dotted keys")
    return key, item


def _index(body: Sequence[tb.Entry], name: str) -> int | None:
    return next((i for i, (key, _) in enumerate(body) if key is not None and key.key == name),
                None)


def _new_job(table: Mapping[str, Any], *, separate: bool) -> Table:
    job = _table(table, "job")
    if separate and "\n" not in job.trivia.indent:
        job.trivia.indent = "\n" + job.trivia.indent
    return job


def _edited_job(current: Item, table: Mapping[str, Any]) -> Item:
    edited = _merged(current, table, "", "jobs")
    if edited is None:
        raise tb.Unsupported("a job that is not a table")
    return edited


def _set_plainly(doc: TOMLDocument, job_id: str, table: Mapping[str, Any]) -> None:
    """The job written anew through tomlkit's mapping interface (the comments inside the
    job are lost): for the layouts that :mod:`cadenza.config.tomlbody` does not rebuild."""
    if "jobs" not in doc:
        doc.append("jobs", tomlkit.table(is_super_table=True))
    jobs = doc["jobs"]
    if not isinstance(jobs, MutableMapping):
        raise ValueError("'jobs' is not a table in this document")
    jobs[job_id] = _table(table, "job")


# -- merging into existing items ----------------------------------------------------------
def _merged(current: Item, value: Any, key: str, level: str) -> Item | None:
    """``current`` changed to ``value``, in its own style; None when ``value`` is of
    another kind (a table for a plain value, say), so it must be written anew."""
    if _unchanged(current, value):
        return current
    inner = _inner_level(level, key)
    if isinstance(current, Table):
        return _merge_table(current, value, inner) if isinstance(value, Mapping) else None
    if isinstance(current, AoT):
        return _merge_steps(current, value, inner) if _is_tables(value) else None
    if isinstance(current, InlineTable) and isinstance(value, Mapping):
        return _merge_inline(current, value)
    new = _item(key, value, level)
    return None if tb.is_section(None, new) else _restyled(new, current, value)


def _merge_table(table: Table, values: Mapping[str, Any], level: str) -> Table:
    head, tail = tb.split_tail(tb.entries(table))
    if not tb.unique_keys(head):  # a table split in parts: written anew, in one
        return tb.table_with(table, tb.with_tail(tb.entries(_table(values, level)), tail))
    out: list[tb.Entry] = []
    kept: set[str] = set()
    for key, item in head:
        if key is not None and key.key in values:
            merged = _merged(item, values[key.key], key.key, level)
            if merged is not None:
                out.append((key, merged))
                kept.add(key.key)
        elif key is None:
            out.append((key, item))
    added = [(name, _item(name, value, level)) for name, value in values.items()
             if name not in kept]
    _insert_plain(out, [(name, item) for name, item in added if not tb.is_section(None, item)])
    for name, item in added:
        if tb.is_section(None, item):
            tb.end_line(out)
            if not tb.ends_with_blank_line(out):
                _separate(item)
            out.append((tomlkit.key(name), item))
    return tb.table_with(table, tb.with_tail(out, tail))


def _insert_plain(out: list[tb.Entry], items: Sequence[tuple[str, Item]]) -> None:
    """Insert ``items`` right after the last plain key of ``out``, written like it."""
    if not items:
        return
    position = next((i + 1 for i in range(len(out) - 1, -1, -1)
                     if out[i][0] is not None and not tb.is_section(*out[i])), 0)
    sample_key, sample = out[position - 1] if position else (None, None)
    separator, indent = " = ", ""
    if sample_key is not None and sample is not None and not isinstance(sample, Table):
        separator = _separator(sample_key)
        indent = sample.trivia.indent if not sample.trivia.indent.strip() else ""
        tb.end_line(out[:position])
    if position == 0 and out and tb.is_section(*out[0]):
        out.insert(0, (None, tomlkit.nl()))  # a header of its own now: a blank line below
    for offset, (name, item) in enumerate(items):
        item.trivia.indent = indent
        out.insert(position + offset, (SingleKey(name, sep=separator), item))


def _separator(key: Key) -> str:
    """What stands between a key and its value (`` = `` or ``=``), as written."""
    written = key.as_string()
    return written[len(written.rstrip()):] + key.sep


def _merge_inline(table: InlineTable, values: Mapping[str, Any]) -> Item:
    """The inline table with ``values``, spaced and separated as it was written (``{ a = 1,
    b = 2 }`` or ``{a=1,b=2}``); each unchanged value as written."""
    keyed = [(key, item) for key, item in tb.entries(table) if key is not None]
    if any(key.is_dotted() for key, _ in keyed):
        return _restyled(_inline(values), table, values)
    text = table.as_string()
    pad = " " if text.startswith("{ ") else ""
    comma = "," if re.search(r",\S", text) else ", "
    separator = _separator(keyed[0][0]) if keyed else " = "
    parts: list[str] = []
    for key, item in keyed:
        if key.key in values:
            merged = _merged(item, values[key.key], key.key, "")
            merged = _item(key.key, values[key.key], "") if merged is None else merged
            parts.append(key.as_string().rstrip() + _separator(key) + merged.as_string())
    written = {key.key for key, _ in keyed}
    parts += [tomlkit.key(name).as_string() + separator + _item(name, value, "").as_string()
              for name, value in values.items() if name not in written]
    inner = comma.join(parts)
    parsed = tomlkit.parse(f"x = {{{pad}{inner}{pad}}}\n" if inner else "x = {}\n").item("x")
    assert isinstance(parsed, Item)
    return _restyled(parsed, table, values)


def _merge_steps(steps: AoT, values: Sequence[Mapping[str, Any]], level: str) -> AoT:
    """The array of tables with ``values``; each table matched by its ``name`` (else by
    its place) keeps its comments, and the comment lines just above its header."""
    parts = [tb.split_item_tail(table) for table in steps.body]
    contents = [content for content, _ in parts]
    tails = [tail for _, tail in parts]
    end = tails[-1] if tails else []  # lines above the next section: stay at the end
    intros: list[list[Item]] = [[], *(tb.trailing_comments(tail) for tail in tails[:-1])]
    plan = _match(contents, values)
    tables: list[Table] = []
    for position, (index, value) in enumerate(plan):
        following = plan[position + 1][0] if position + 1 < len(plan) else None
        if index is None:
            content = _table(value, level)
        else:
            old = contents[index]
            assert isinstance(old, Table)
            content = old if _unchanged(old, value) else _merge_table(old, value, level)
        if position + 1 == len(plan):
            trailing = end
        elif index is not None and following == index + 1:
            trailing = [*tails[index], *intros[index + 1]]
        else:
            gap = tails[index] if index is not None and index + 1 < len(tails) else []
            trailing = [*(gap or [tomlkit.nl()]),
                        *(intros[following] if following is not None else [])]
        trivia = None
        if position == 0 and index:  # its comment lines go above the first header
            trivia = tb.copy_trivia(content.trivia)
            trivia.indent = "".join(item.as_string() for item in intros[index]) + trivia.indent
        if trailing or trivia is not None:
            body = tb.entries(content)
            tb.end_line(body)
            content = tb.table_with(content, tb.with_tail(body, trailing), trivia)
        tables.append(content)
    return tb.aot_with(steps, tables)


def _match(contents: Sequence[Item], values: Sequence[Mapping[str, Any]],
           ) -> list[tuple[int | None, Mapping[str, Any]]]:
    """Which old table (index) each new value edits: the same name, else the same place."""
    names = [content.get("name") if isinstance(content, Table) else None
             for content in contents]
    unused = list(range(len(contents)))
    plan: list[tuple[int | None, Mapping[str, Any]]] = []
    for value in values:
        name = value.get("name")
        index = next((i for i in unused if name is not None and names[i] == name), None)
        if index is not None:
            unused.remove(index)
        plan.append((index, value))
    for position, (index, value) in enumerate(plan):
        if index is None and position in unused and names[position] not in \
                [v.get("name") for v in values]:
            unused.remove(position)
            plan[position] = (position, value)
    return plan


def _restyled(new: Item, old: Item, value: Any) -> Item:
    """``new`` written where ``old`` stood: its indent and trailing comment, an array's
    layout over lines, a string's quotes when they can hold the value."""
    quotes = old.as_string()[:3] if isinstance(old, String) else ""
    if isinstance(value, str) and quotes.startswith("'") \
            and _literal_ok(value, multiline=quotes == "'''"):
        new = tomlkit.string(value, literal=True, multiline=quotes == "'''")
    if isinstance(new, Array) and isinstance(old, Array) and "\n" in old.as_string():
        new.multiline(True)
    new.trivia.indent = old.trivia.indent
    new.trivia.comment_ws = old.trivia.comment_ws
    new.trivia.comment = old.trivia.comment
    new.trivia.trail = old.trivia.trail
    return new


def _literal_ok(value: str, *, multiline: bool) -> bool:
    if multiline:
        return "'''" not in value and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", value)
    return "'" not in value and not re.search(r"[\x00-\x08\x0a-\x1f\x7f]", value)


def _inner_level(level: str, key: str) -> str:
    if level == "jobs":
        return "job"
    if level == "job":
        return key
    return "preset" if level == "presets" else level


def _plain(value: Any) -> Any:
    return value.unwrap() if isinstance(value, Item) else value


def _unchanged(current: Item, value: Any) -> bool:
    """Whether ``current`` already holds ``value`` (``true`` is not ``1``, nor ``1.0``)."""
    plain = _plain(current)
    if isinstance(plain, bool | int | float) or isinstance(value, bool | int | float):
        return type(plain) is type(value) and plain == value
    return bool(plain == value)


def _is_tables(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) \
        and all(isinstance(v, Mapping) for v in value)


def _separate(item: Item) -> None:
    """A blank line above the first header of a new table."""
    first = item.body[0] if isinstance(item, AoT) and item.body else item
    if isinstance(first, Table) and "\n" not in first.trivia.indent:
        first.trivia.indent = "\n" + first.trivia.indent


# -- building new items -----------------------------------------------------------------
def _item(key: str, value: Any, level: str) -> Item:
    if isinstance(value, Mapping):
        if level == "job" and key == "presets":
            presets = tomlkit.table(is_super_table=True)
            for name, preset in value.items():
                presets.append(name, _table(preset, "preset"))
            return presets
        if level == "presets":
            return _table(value, "preset")
        if level == "job" and key in _JOB_TABLES:
            return _table(value, key)
        return _inline(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        if level == "job" and key == "steps" and _is_tables(value):
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
