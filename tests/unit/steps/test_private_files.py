"""Files Cadenza keeps private (the secret key, the secrets, the store's files, backups)
are refused by every step that reads or writes files, however the path is spelled, and a
template is read from the home's templates/ folder only."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sql_ctx import SqlTestContext, execute, run_step

from cadenza.domain.errors import Fatal
from cadenza.private_files import RULE, PrivateFiles
from cadenza.steps.builtin.file_export import FileExportStep
from cadenza.steps.builtin.file_load import FileLoadStep
from cadenza.steps.builtin.report import ReportStep

KEY = "c2VjcmV0LWtleS1tYXRlcmlhbC1vZi10aGUtaG9tZQ=="


@pytest.fixture
def home(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "files").mkdir(parents=True)
    (data / "backups").mkdir()
    (data / "secret.key").write_text(KEY + "\n")
    (data / "secrets.json").write_text('{"version": 1, "secrets": {}}')
    (data / "cadenza.db").write_bytes(b"SQLite format 3\x00")
    (data / "cadenza.db-wal").write_bytes(b"wal")
    (data / "backups" / "cadenza-1.db").write_bytes(b"SQLite format 3\x00")
    (tmp_path / "templates").mkdir()
    return tmp_path


def _ctx(home: Path, roots: list[str] | None = None) -> SqlTestContext:
    url = f"sqlite:///{(home / 'data' / 'w.db').as_posix()}"
    execute(url, "CREATE TABLE IF NOT EXISTS t (a INTEGER)", "DELETE FROM t",
            "INSERT INTO t VALUES (1)")
    return SqlTestContext(home, {"w": url}, step_type="report", roots=roots)


@pytest.fixture
def ctx(home: Path) -> Iterator[SqlTestContext]:
    c = _ctx(home)
    yield c
    c.close()


SECTIONS: list[dict[str, Any]] = [{"title": "T", "connection": "w", "query": "SELECT a FROM t"}]


def _report(ctx: SqlTestContext, template: str) -> Any:
    return run_step(ReportStep, ctx, path="r.html", sections=SECTIONS, template=template)


@pytest.mark.parametrize("template", [
    "data/secret.key", "./data//secret.key", "data/./secrets.json", "data/cadenza.db-wal",
    "data/backups/cadenza-1.db", "templates/../data/secret.key", "data/../data/secret.key",
])
def test_a_report_template_never_reads_a_private_file(ctx: SqlTestContext, home: Path,
                                                       template: str) -> None:
    with pytest.raises((Fatal, ValidationError)) as caught:
        _report(ctx, template)
    assert KEY not in str(caught.value)
    if isinstance(caught.value, Fatal):
        assert "step 'step': template" in str(caught.value)
        assert RULE in str(caught.value) or "templates/" in str(caught.value)
    assert not (home / "data" / "files" / "r.html").exists()


def test_an_absolute_template_path_is_refused(ctx: SqlTestContext, home: Path) -> None:
    with pytest.raises((Fatal, ValidationError)) as caught:
        _report(ctx, str(home / "data" / "secret.key"))
    assert KEY not in str(caught.value)


def test_a_link_in_templates_to_the_key_is_refused_unread(ctx: SqlTestContext,
                                                          home: Path) -> None:
    (home / "templates" / "link.html").symlink_to(home / "data" / "secret.key")
    with pytest.raises(Fatal, match=RULE) as caught:
        _report(ctx, "templates/link.html")
    assert KEY not in str(caught.value)
    # included from an ordinary template: refused the same way
    (home / "templates" / "r.html").write_text('<p>{% include "link.html" %}</p>')
    with pytest.raises(Fatal, match=RULE) as caught:
        _report(ctx, "templates/r.html")
    assert KEY not in str(caught.value)
    assert not (home / "data" / "files" / "r.html").exists()


def test_a_template_outside_templates_is_refused(ctx: SqlTestContext, home: Path) -> None:
    (home / "data" / "files" / "t.html").write_text("<p>{{ title }}</p>")
    with pytest.raises(Fatal, match=r"not in the home's templates/ folder"):
        _report(ctx, "data/files/t.html")
    (home / "templates" / "away.html").symlink_to(home / "data" / "files" / "t.html")
    with pytest.raises(Fatal, match="home's templates/ folder"):
        _report(ctx, "templates/away.html")
    (home / "templates" / "ok.html").write_text("<p>{{ title }}</p>")
    _report(ctx, "templates/ok.html")
    assert (home / "data" / "files" / "r.html").read_text().startswith("<p>")


@pytest.mark.parametrize("path", ["secret.key", "./secrets.json", "backups/cadenza-1.db",
                                  "cadenza.db-wal", "backups/*.db", "secret.*"])
def test_file_load_refuses_private_files_under_a_wide_root(home: Path, path: str) -> None:
    ctx = _ctx(home, roots=["data"])
    try:
        with pytest.raises(Fatal, match=RULE) as caught:
            run_step(FileLoadStep, ctx, path=path, connection="w", table="x", format="csv")
        assert "step 'step': path" in str(caught.value)
        assert KEY not in str(caught.value)
    finally:
        ctx.close(ok=False)


def test_a_hard_link_to_the_key_is_refused(home: Path) -> None:
    os.link(home / "data" / "secret.key", home / "data" / "files" / "innocent.csv")
    os.link(home / "data" / "backups" / "cadenza-1.db", home / "data" / "files" / "b.csv")
    ctx = _ctx(home)
    try:
        for path in ("innocent.csv", "b.csv"):
            with pytest.raises(Fatal, match=RULE):
                run_step(FileLoadStep, ctx, path=path, connection="w", table="x",
                         format="csv")
    finally:
        ctx.close(ok=False)


def test_file_export_never_writes_over_a_private_file(home: Path) -> None:
    ctx = _ctx(home, roots=["data"])
    try:
        for path in ("secret.key", "cadenza.db", "backups/new.csv"):
            with pytest.raises(Fatal, match=RULE):
                run_step(FileExportStep, ctx, path=path, connection="w",
                         query="SELECT a FROM t", format="csv")
    finally:
        ctx.close(ok=False)
    assert (home / "data" / "secret.key").read_text() == KEY + "\n"
    assert not (home / "data" / "backups" / "new.csv").exists()


def test_private_files_follow_the_store_url_and_ignore_ordinary_files(home: Path) -> None:
    private = PrivateFiles.of(home, f"sqlite:///{home.as_posix()}/elsewhere/store.sqlite")
    assert private.reason(home / "elsewhere" / "store.sqlite-shm") is not None
    assert private.reason("data/secret.key") is not None
    assert private.reason(home / "data" / "files" / ".." / "secrets.json") is not None
    (home / "data" / "files" / "ok.csv").write_text("a\n1\n")
    assert private.reason(home / "data" / "files" / "ok.csv") is None
    assert private.reason(home / "data" / "w.db") is None


def test_a_sql_query_file_never_reads_a_private_file(home: Path) -> None:
    from cadenza.steps.builtin.sql_query import SqlQueryStep

    ctx = _ctx(home)
    try:
        with pytest.raises(Fatal, match=RULE) as caught:
            run_step(SqlQueryStep, ctx, connection="w", file="data/secret.key")
        assert "step 'step': file" in str(caught.value) and KEY not in str(caught.value)
    finally:
        ctx.close(ok=False)
