"""What a library offers no public API for, each in one function.

Cadenza calls no private attribute (``_name``) of a library anywhere else. Where a need has
no public way, it is met here, in one function that names the versions it was checked on;
``tests/unit/test_compat.py`` runs each against the installed version (and fails when that
version is outside the range checked, so that ``make test-latest`` finds the drift before a
user does).

Not in this file because they are public, despite the underscore: SQLAlchemy's
``Row._mapping`` (documented; the underscore only keeps it apart from column names) and
``os._exit`` (documented in the standard library).
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: the PyMySQL versions :func:`mysql_column_flags` was checked on (lowest, highest included)
PYMYSQL_CHECKED = ((1, 1, 0), (1, 2, 4))


class MysqlColumn(NamedTuple):
    """What the MySQL protocol says of a result column beyond the DB-API description."""

    flags: int  #: the column's flags (32: UNSIGNED)
    charsetnr: int  #: the character set's number (63: binary)
    length: int  #: the column's declared display length (1 for TINYINT(1))


def mysql_columns(cursor: Any) -> list[MysqlColumn]:
    """The flags, character set and length of each column of the result ``cursor`` (a
    PyMySQL cursor) is reading.

    The DB-API ``description`` leaves out UNSIGNED, the binary character set and the
    display length, which tell ``BIGINT UNSIGNED`` from ``BIGINT``, ``VARBINARY`` from
    ``VARCHAR`` and a boolean ``TINYINT(1)``. PyMySQL keeps them only on the result's
    field packets (``cursor._result.fields``), with no public accessor; checked on PyMySQL
    1.1.0 to 1.2.4 (:data:`PYMYSQL_CHECKED`).
    """
    fields = cursor._result.fields
    return [MysqlColumn(int(f.flags), int(f.charsetnr), int(f.length)) for f in fields]
