"""Tables of a tomlkit document rebuilt from their entries, on tomlkit's public API only.

tomlkit edits a parsed document through ``table[key] = value``, ``del table[key]`` and
``append``. None of them puts a key at a chosen place or moves a comment, and replacing a
table through them renders its headers again and may add blank lines. The writer
(:mod:`cadenza.config.tomledit`) therefore does not edit a table in place: it builds a new
one from the old one's entries, in the order it wants, the way tomlkit's parser builds a
table: a ``Container(parsed=True)`` filled with ``append``, which keeps each entry as given.
The entries are the same item objects, so each comment, blank line, spacing and header
renders as it was read. Only the document's root is changed in place
(:func:`replace_in_root`): its ``jobs`` entry is removed and appended again.

An *entry* is a ``(key, item)`` pair of a table's body; comments and blank lines have no
key. A *section* is an entry that renders ``[headers]``: a table (not a dotted key) or an
array of tables. The *tail* of a table is the run of comments and blank lines that ends
the last table it renders: in a parsed document, the lines just above the next header.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import ParseError
from tomlkit.items import AoT, Comment, InlineTable, Item, Key, Null, Table, Trivia, Whitespace
from tomlkit.toml_document import TOMLDocument

Entry = tuple[Key | None, Item]


class Unsupported(Exception):
    """The document's layout is not one these functions rebuild (a table split in parts
    out of order, say); the caller edits it another way."""


def entries(item: Table | InlineTable | Container) -> list[Entry]:
    """The entries of a table's (or a document's) body, without the placeholders that
    tomlkit leaves where a key was deleted."""
    body = item.body if isinstance(item, Container) else item.value.body
    return [(key, value) for key, value in body if not isinstance(value, Null)]


def container(body: Iterable[Entry]) -> Container:
    """A container holding ``body`` as given (the parser's way of filling one)."""
    box = Container(True)
    for key, item in body:
        box.append(key, item)
    box.parsing(False)
    return box


def table_with(table: Table, body: Iterable[Entry], trivia: Trivia | None = None) -> Table:
    """A table like ``table`` (header, kind, trailing comment) holding ``body``."""
    return Table(container(body), table.trivia if trivia is None else trivia,
                 table.is_aot_element(), table.is_super_table(), name=table.name,
                 display_name=table.display_name)


def aot_with(aot: AoT, tables: Sequence[Table]) -> AoT:
    """An array of tables like ``aot`` holding ``tables`` as given."""
    return AoT(list(tables), name=aot.name, parsed=True)


def copy_trivia(source: Trivia) -> Trivia:
    return Trivia(indent=source.indent, comment_ws=source.comment_ws,
                  comment=source.comment, trail=source.trail)


def is_section(key: Key | None, item: Item) -> bool:
    if isinstance(item, AoT):
        return True
    return isinstance(item, Table) and not (key is not None and key.is_dotted())


def has_key(body: Sequence[Entry], name: str) -> bool:
    return any(key is not None and key.key == name for key, _ in body)


def unique_keys(body: Sequence[Entry]) -> bool:
    names = [key.key for key, _ in body if key is not None]
    return len(names) == len(set(names))


# -- tails --------------------------------------------------------------------------------
def split_tail(body: Sequence[Entry]) -> tuple[list[Entry], list[Item]]:
    """``body`` without its tail, and the tail."""
    end = len(body)
    while end and body[end - 1][0] is None:
        end -= 1
    head, tail = list(body[:end]), [item for _, item in body[end:]]
    if head and is_section(*head[-1]):
        key, item = head[-1]
        rest, inner = split_item_tail(item)
        head[-1] = (key, rest)
        tail = [*inner, *tail]
    return head, tail


def split_item_tail(item: Item) -> tuple[Item, list[Item]]:
    """A section without its tail, and the tail."""
    if isinstance(item, AoT):
        if not item.body:
            return item, []
        last, tail = split_item_tail(item.body[-1])
        if not tail or not isinstance(last, Table):
            return item, tail
        return aot_with(item, [*item.body[:-1], last]), tail
    if not isinstance(item, Table):
        return item, []
    head, tail = split_tail(entries(item))
    return (table_with(item, head) if tail else item), tail


def with_tail(body: Sequence[Entry], tail: Sequence[Item]) -> list[Entry]:
    """``body`` with ``tail`` at the end of the last table it renders."""
    out = list(body)
    if not tail:
        return out
    if out and is_section(*out[-1]):
        key, item = out[-1]
        inner = item_with_tail(item, tail)
        if inner is not None:
            out[-1] = (key, inner)
            return out
    return [*out, *((None, item) for item in tail)]


def item_with_tail(item: Item, tail: Sequence[Item]) -> Item | None:
    """A section with ``tail`` at its end; None when it renders no table to hold it (an
    empty array of tables, or a super table with nothing in it)."""
    if isinstance(item, AoT):
        if not item.body:
            return None
        last = item_with_tail(item.body[-1], tail)
        return None if not isinstance(last, Table) else aot_with(item, [*item.body[:-1], last])
    if not isinstance(item, Table):
        return None
    body = entries(item)
    if item.is_super_table() and not any(is_section(*entry) for entry in body):
        return None
    return table_with(item, with_tail(body, tail))


def collapse(tail: Sequence[Item], *, last: bool) -> list[Item]:
    """Runs of blank lines merged into one; none at all at the end of the file."""
    out: list[Item] = []
    for item in tail:
        if isinstance(item, Whitespace) and out and isinstance(out[-1], Whitespace):
            continue
        out.append(item)
    while last and out and isinstance(out[-1], Whitespace):
        out.pop()
    return out


def trailing_comments(tail: list[Item]) -> list[Item]:
    """Remove and return the comment lines that end ``tail`` (those just above a header,
    with no blank line between)."""
    start = len(tail)
    while start and isinstance(tail[start - 1], Comment):
        start -= 1
    taken = tail[start:]
    del tail[start:]
    return taken


def blank_out(comments: Sequence[Item]) -> None:
    """Make comment lines render as nothing: tomlkit has no public way to remove a comment
    from a document's root, which is edited in place."""
    for item in comments:
        trivia = item.trivia
        trivia.indent = trivia.comment_ws = trivia.comment = trivia.trail = ""


# -- lines ----------------------------------------------------------------------------------
def last_line(body: Sequence[Entry]) -> Item | None:
    """The item that renders the last line of ``body`` (None for an empty body)."""
    if not body:
        return None
    key, item = body[-1]
    if isinstance(item, AoT):
        return last_line(entries(item.body[-1])) if item.body else None
    if isinstance(item, Table) and is_section(key, item):
        inner = last_line(entries(item))
        return item if inner is None else inner
    return item


def ends_with_blank_line(body: Sequence[Entry]) -> bool:
    line = last_line(body)
    return isinstance(line, Whitespace) and line.as_string().endswith("\n")


def end_line(body: Sequence[Entry]) -> None:
    """Make the last line of ``body`` end with a newline (a file may end without one), so
    that what is added after it starts a line of its own."""
    line = last_line(body)
    if line is None or isinstance(line, Whitespace):
        return
    if "\n" not in line.trivia.trail:
        line.trivia.trail += "\n"


# -- the root ---------------------------------------------------------------------------------
def replace_in_root(doc: TOMLDocument, key: Key, item: Item,
                    before: Sequence[Item] = ()) -> None:
    """Put ``item`` in place of the root entry ``key`` of ``doc`` (or add it), with the
    comment lines ``before`` just above it. The entries after it are appended again in
    their order; :class:`Unsupported` when one of them cannot be (a comment, a key split
    in parts)."""
    body = entries(doc)
    index = next((i for i, (k, _) in enumerate(body) if k is not None and k == key), None)
    after = [] if index is None else body[index + 1:]
    if any(k is None for k, _ in after) or not unique_keys(body):
        raise Unsupported("the root of the document has entries after the jobs")
    doc.parsing(True)
    try:
        for k, _ in ([] if index is None else [body[index]]) + after:
            assert k is not None
            doc.remove(k)
        for comment in before:
            doc.append(None, comment)
        doc.append(key, item)
        for k, value in after:
            doc.append(k, value)
    finally:
        doc.parsing(False)


def kept_spacing(original: str, edited: str) -> str:
    """``edited`` (a document parsed from ``original``, changed, then rendered) with the
    lines that tomlkit rewrote without being asked given back as ``original`` had them.

    tomlkit (0.13.3 to 0.15.3 checked) drops the blank after a date, a time or a datetime
    inside an inline table or an array when it renders a document it parsed:
    ``{ since = 2027-03-01 }`` comes back as ``{ since = 2027-03-01}``, on every line of the
    file, edited or not. A line of ``edited`` that is such a rewriting of a line of
    ``original`` (the same characters but for blanks) is replaced by the original line; the
    two mean the same TOML, so nothing but the spacing changes.
    """
    try:
        rendered = tomlkit.parse(original).as_string()
    except ParseError:
        return edited
    if rendered == original:
        return edited
    before = original.splitlines(keepends=True)
    after = rendered.splitlines(keepends=True)
    if len(before) != len(after):
        return edited
    restore: dict[str, str] = {}
    for was, now in zip(before, after, strict=True):
        if was != now and "".join(was.split()) == "".join(now.split()):
            restore.setdefault(now, was)
    if not restore:
        return edited
    return "".join(restore.get(line, line) for line in edited.splitlines(keepends=True))
