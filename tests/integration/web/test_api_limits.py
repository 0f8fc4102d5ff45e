"""Request size limits: a large body is refused with 413 before the app reads it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tests.integration.web.api_env import api_env

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
