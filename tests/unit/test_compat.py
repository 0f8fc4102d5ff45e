"""The one place where Cadenza reads what a library keeps private (cadenza.compat), run
against the installed version, and the rule that nothing else in src/ does."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
import sqlalchemy as sa

from cadenza.compat import PYMYSQL_CHECKED, mysql_columns

SRC = Path(__file__).resolve().parents[2] / "src" / "cadenza"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_pymysql_is_within_the_range_checked() -> None:
    low, high = PYMYSQL_CHECKED
    installed = _version(metadata.version("PyMySQL"))
    assert low <= installed <= high, (
        f"PyMySQL {installed} is outside the range cadenza.compat.mysql_columns "
        f"was checked on ({low} to {high}): run tests/unit/test_compat.py on MariaDB, then "
        "widen PYMYSQL_CHECKED")


def test_mysql_columns_reads_unsigned_binary_and_tinyint1(mariadb_url: str) -> None:
    engine = sa.create_engine(mariadb_url)
    try:
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("SELECT CAST(1 AS UNSIGNED) AS u, CAST(-1 AS SIGNED) AS s, "
                           "CAST('x' AS BINARY) AS b, CAST('x' AS CHAR) AS t")
            columns = mysql_columns(cursor)
            cursor.fetchall()
        finally:
            raw.close()
    finally:
        engine.dispose()
    unsigned, signed, binary, text = columns
    assert unsigned.flags & 32 and not signed.flags & 32
    assert binary.charsetnr == 63 and text.charsetnr != 63


# `name._attr` where name is not self/cls and the attribute is private; our own modules'
# cross-module helpers are matched too and allowed by the prefix list below.
_PRIVATE = re.compile(r"\b([A-Za-z_][A-Za-z_0-9]*)\.(_[a-z][A-Za-z_0-9]*)\b")
#: public despite the underscore (see cadenza.compat's docstring)
_PUBLIC = {"_mapping", "_exit", "_asdict", "_replace", "_fields", "_make"}


def test_no_private_attribute_of_a_library_outside_compat() -> None:
    hits = []
    for path in SRC.rglob("*.py"):
        if path.name == "compat.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if code.lstrip().startswith(('"', "'", ":")):
                continue
            for owner, attr in _PRIVATE.findall(code):
                if owner in {"self", "cls", "super"} or attr in _PUBLIC or attr.startswith("__"):
                    continue
                # a module or object of ours: an attribute defined somewhere in src/
                if re.search(rf"\bdef {attr}\b|\b{attr}\s*[:=]|\bclass {attr}\b",
                             _ALL_SOURCE):
                    continue
                hits.append(f"{path.relative_to(SRC)}:{number}: {owner}.{attr}")
    assert not hits, "private attributes of a library (wrap them in cadenza/compat.py):\n" + \
        "\n".join(hits)


_ALL_SOURCE = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py")
                        if p.name != "compat.py")


@pytest.mark.parametrize("line", ["container._insert_after(a, b, c)", "out._file = x"])
def test_the_rule_sees_a_private_call(line: str) -> None:
    _owner, attr = _PRIVATE.findall(line)[0]
    assert attr.startswith("_") and not re.search(
        rf"\bdef {attr}\b|\b{attr}\s*[:=]|\bclass {attr}\b", _ALL_SOURCE)
