"""SQL lives in ``store/``: no module outside it holds SQL text, builds a query with
SQLAlchemy or imports the store's tables. Other packages call the store's named functions
and methods (docs/store.md, "Where the SQL is").

Exempt: ``steps/`` and the executor's connections to the users' databases
(``executor/connections.py``, ``executor/context.py``): the SQL there is the user's, run on
the user's databases, not Cadenza's store; and the demo home's sample warehouse
(:data:`USERS_SQL`), a user's database too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import cadenza

ROOT = Path(cadenza.__file__).parent
EXEMPT = ("store/", "steps/", "executor/connections.py", "executor/context.py")
SQL_TEXT = re.compile(
    r"\b(SELECT\b.+\bFROM|UPDATE\s+\w+\s+SET|INSERT\s+INTO|DELETE\s+FROM|"
    r"CREATE\s+(TABLE|INDEX)|ON\s+CONFLICT|FOR\s+UPDATE|pg_\w+\()", re.S)
USERS_SQL = {("home.py", "CREATE TABLE IF NOT EXISTS sales_monthly")}
"""(module, start of the text): SQL for a user's database, not the store."""
BUILDERS = {"select", "insert", "update", "delete", "text", "func", "and_", "or_", "case",
            "literal", "bindparam", "exists", "tuple_", "union_all", "column", "table"}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (module, classes, functions)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value,
                                                                     ast.Constant):
                found.add(id(body[0].value))
    # A string standing alone after an assignment documents it (attribute docstrings).
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))
    return found


def sql_outside_the_store(source: str, name: str) -> list[str]:
    """``name:line: what`` for each piece of SQL in ``source``."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    aliases = {"sqlalchemy"}
    hits: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "sqlalchemy":
                    aliases.add(alias.asname or alias.name)
                if alias.name.startswith("cadenza.store.tables"):
                    hits.append(f"{name}:{node.lineno}: imports the store's tables")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "cadenza.store.tables" or (
                    node.module == "cadenza.store"
                    and any(a.name == "tables" for a in node.names)):
                hits.append(f"{name}:{node.lineno}: imports the store's tables")
            if node.module.startswith("sqlalchemy") and any(
                    a.name in BUILDERS or a.name == "insert" for a in node.names):
                hits.append(f"{name}:{node.lineno}: imports a query builder of SQLAlchemy")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr in BUILDERS:
            hits.append(f"{name}:{node.lineno}: builds a query ({node.value.id}.{node.attr})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and SQL_TEXT.search(node.value) \
                and not any(name == module and node.value.startswith(text)
                            for module, text in USERS_SQL):
            hits.append(f"{name}:{node.lineno}: SQL text {node.value[:40]!r}")
    return hits


def test_no_module_outside_the_store_holds_sql() -> None:
    files = [p for p in sorted(ROOT.rglob("*.py"))
             if not str(p.relative_to(ROOT).as_posix()).startswith(EXEMPT)]
    assert len(files) > 100
    found = [hit for path in files
             for hit in sql_outside_the_store(path.read_text(encoding="utf-8"),
                                              path.relative_to(ROOT).as_posix())]
    assert found == []


def test_the_check_sees_every_kind_of_sql() -> None:
    source = '''
"""A docstring may say SELECT x FROM runs."""
import sqlalchemy as sa
from sqlalchemy import select
from cadenza.store.tables import runs
from cadenza.store import tables

QUERY = "SELECT id FROM runs WHERE state = ?"
"""And so may this one: UPDATE runs SET state = 'x'."""

def f(conn):
    conn.execute(sa.text("DELETE FROM resources"))
    return sa.select(runs.c.id)

def g(cursor):
    cursor.execute("INSERT INTO event_log VALUES (?)", [1])
    cursor.execute(f"SELECT pg_try_advisory_lock({1})")
'''
    hits = [hit.split(": ", 1)[1] for hit in sql_outside_the_store(source, "x.py")]
    assert sorted(hits) == sorted([
        "imports a query builder of SQLAlchemy",
        "imports the store's tables",
        "imports the store's tables",
        "SQL text 'SELECT id FROM runs WHERE state = ?'",
        "builds a query (sa.text)",
        "SQL text 'DELETE FROM resources'",
        "builds a query (sa.select)",
        "SQL text 'INSERT INTO event_log VALUES (?)'",
        "SQL text 'SELECT pg_try_advisory_lock('",
    ])
