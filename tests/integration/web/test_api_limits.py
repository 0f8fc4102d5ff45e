"""Request limits: a large body is refused with 413 before the app reads it; a NUL byte in
the URL with 422 naming the parameter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.integration.web.api_env import api_env
from tests.support.store_helpers import login_failures_since

from cadenza.web.limits import MAX_BODY_BYTES


def test_large_bodies_are_refused(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        editor = env.session("editor")
        before = env.services.home.jobs_file.read_text(encoding="utf-8")
        big = {"definition": {"description": "x" * MAX_BODY_BYTES}, "base_hash": "h"}
        answer = editor.put("/api/jobs/hello", json=big)
        assert answer.status_code == 413 and "larger than" in answer.json()["error"]

        def chunks() -> Iterator[bytes]:
            yield b'{"username": "'
            for _ in range(MAX_BODY_BYTES // 1024 + 1):
                yield b"a" * 1024
            yield b'", "password": "x"}'

        streamed = env.client.post("/api/login", content=chunks(),
                                   headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413
        assert env.services.home.jobs_file.read_text(encoding="utf-8") == before
        assert editor.get("/api/me").status_code == 200


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_nul_byte_in_the_url_is_the_clients_error(tmp_path: Path, backend: str,
                                                     request: pytest.FixtureRequest) -> None:
    # Found by the schema fuzzing on PostgreSQL: /api/events?resource=...%00... answered
    # 503 "store read failed: PostgreSQL text fields cannot contain NUL (0x00) bytes".
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    with api_env(tmp_path, store_url=url) as env:
        viewer = env.session("viewer")
        events = env.store.list_events()
        for path, params, field in [
                ("/api/events", {"resource": "u\x00-1"}, "resource"),
                ("/api/events", {"actor": "\x00"}, "actor"),
                ("/api/runs", {"job": "hello\x00"}, "job"),
                ("/api/runs/01J%00", {}, "path"),
                ("/runs", {"state": "QUEUED", "job": "\x00"}, "job"),
                ("/api/events", {"\x00<b>": "x"}, "a query parameter")]:
            answer = viewer.get(path, params=params)
            assert answer.status_code == 422, (path, params, answer.text)
            assert answer.json() == {"error": f"{field}: a NUL byte is not allowed",
                                     "field": field}
        # the same requests without the NUL still work, and nothing was written
        assert viewer.get("/api/events", params={"resource": "u-1"}).status_code == 200
        assert viewer.get("/runs", params={"job": "hello"}).status_code == 200
        assert env.store.list_events() == events
        # in a body: a login name with a NUL is nobody (401, counted for the throttle on
        # both stores; it was a 500 on PostgreSQL). Any other text with a NUL that reaches
        # PostgreSQL is answered 422 (tests/unit/web/test_nul_errors.py).
        for _ in range(2):
            login = env.client.post("/api/login", json={"username": "ana\x00",
                                                        "password": "x"})
            assert login.status_code == 401, login.text
        failures = login_failures_since(env.store,
            "ana\\x00", "testclient", env.services.clock.now() - timedelta(hours=1))
        assert failures[0] == 2, failures


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_huge_integer_parameter_is_the_clients_error(tmp_path: Path, backend: str,
                                                        request: pytest.FixtureRequest) -> None:
    # A cursor past 64 bits overflowed the store's integer: SQLite's driver raised
    # OverflowError (a 500 that reset the connection) and PostgreSQL's bigint compared it.
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    huge = "99999999999999999999999999"
    with api_env(tmp_path, store_url=url) as env:
        viewer = env.session("viewer")
        for path, params, field in [
                ("/api/events", {"cursor": huge}, "cursor"),
                ("/api/events", {"cursor": str(2**63)}, "cursor"),
                ("/api/events", {"cursor": "-1"}, "cursor"),
                ("/api/events", {"limit": huge}, "limit"),
                ("/api/runs", {"limit": huge}, "limit"),
                ("/api/notifications", {"limit": huge}, "limit"),
                ("/audit", {"before": huge}, "before"),
                ("/audit", {"after": huge}, "after"),
                ("/runs/any/live", {"after": huge}, "after")]:
            answer = viewer.get(path, params=params)
            assert answer.status_code == 422, (path, params, answer.text)
            assert field in answer.text, (path, answer.text)
        # A run id is the runs' cursor: a number is not one (422, not a lookup).
        runs = viewer.get("/api/runs", params={"cursor": huge})
        assert runs.status_code == 422 and "invalid cursor" in runs.json()["error"]
        # The largest id the store holds is still a cursor (an empty page).
        last = viewer.get("/api/events", params={"cursor": str(2**63 - 1)})
        assert last.status_code == 200 and last.json() == {"events": [], "next_cursor": None}
        assert viewer.get("/audit", params={"before": str(2**63 - 1)}).status_code == 200
