"""The position indexer: key paths of a TOML text → line and column."""

from __future__ import annotations

from config_helpers import line_of

from cadenza.config.locate import PositionIndex

TEXT = '''\
# comment with [brackets] and key = "value"
[jobs.sales-load]  # trailing comment
schedule = "0 2 * * *"
params = { period = "${month.current}", nested.deep = [1, { a = 2 }] }
query = """
[not.a.header]
still = "in the string"
"""
literal = \'\'\'
[also.not]\'\'\'

[jobs.sales-load.retry]
attempts = 3

[[jobs.sales-load.steps]]
name = "one"

[[jobs.sales-load.steps]]
name = "two"
json = { rows = "x",
         more = 1 }
tags = [
  "a",   # first
  'b',
]

[jobs.sales-load.steps.sub]
k = 1

[jobs."quoted id"]
a.b.c = true

[[jobs.other.steps]]
name = "first of other"
'''


def test_headers_keys_and_values_are_located() -> None:
    index = PositionIndex(TEXT)
    job = ("jobs", "sales-load")
    assert index.key(job) == (line_of(TEXT, "[jobs.sales-load]  #"), 1)
    assert index.key((*job, "schedule")) == (3, 1)
    assert index.value((*job, "schedule")) == (3, 12)
    assert index.value((*job, "params", "period")) == (4, 21)
    assert index.value((*job, "params", "nested", "deep", 1, "a")) == (4, 65)
    assert index.key((*job, "retry", "attempts")) == (line_of(TEXT, "attempts = 3"), 1)


def test_multiline_strings_hide_their_content() -> None:
    index = PositionIndex(TEXT)
    assert ("not", "a", "header") not in index.keys
    assert ("also", "not") not in index.keys
    assert index.key(("jobs", "sales-load", "literal")) == (line_of(TEXT, "literal ="), 1)


def test_arrays_of_tables_are_counted() -> None:
    index = PositionIndex(TEXT)
    steps = ("jobs", "sales-load", "steps")
    assert index.key((*steps, 0)) == (line_of(TEXT, 'name = "one"') - 1, 1)
    assert index.key((*steps, 1, "name")) == (line_of(TEXT, 'name = "two"'), 1)
    assert index.key((*steps, 1, "json", "more")) == (line_of(TEXT, "more = 1"), 10)
    assert index.value((*steps, 1, "tags", 1)) == (line_of(TEXT, "'b',"), 3)
    assert index.key((*steps, 1, "sub", "k")) == (line_of(TEXT, "k = 1"), 1)
    assert index.key(("jobs", "other", "steps", 0, "name")) == (line_of(TEXT, "first of"), 1)


def test_quoted_and_dotted_keys() -> None:
    index = PositionIndex(TEXT)
    assert index.key(("jobs", "quoted id")) == (line_of(TEXT, '[jobs."quoted id"]'), 1)
    assert index.value(("jobs", "quoted id", "a", "b", "c")) == (line_of(TEXT, "a.b.c"), 9)


def test_unknown_paths_fall_back_to_the_nearest_parent() -> None:
    index = PositionIndex(TEXT)
    line = line_of(TEXT, 'name = "two"')
    assert index.key(("jobs", "sales-load", "steps", 1, "missing")) == (line - 1, 1)
    assert index.key(("nothing", "here")) == (1, 1)


def test_broken_text_never_raises() -> None:
    for text in ['a = "unterminated', "[[", "[a.b", "= 1", 'x = [1, {a = ', "'''", "a.=1",
                 "\r\n[x]\r\ny = 1\r\n"]:
        index = PositionIndex(text)
        assert index.key(("x", "y")) >= (1, 1)
    crlf = PositionIndex("\r\n[x]\r\ny = 1\r\n")
    assert crlf.value(("x", "y")) == (3, 5)


def test_an_unterminated_value_is_remembered() -> None:
    assert PositionIndex('a = 1\nb = """never closed\n\nc = 2\n').unterminated == (2, 5)
    assert PositionIndex("a = [1,\n2\n").unterminated == (1, 5)
    assert PositionIndex("a = [1]\n").unterminated is None
