"""A text with a NUL byte that reaches PostgreSQL is the client's error (422), wherever it
came from (web/api/errors.py); any other database error stays a server error. The real
PostgreSQL cases (a URL, a login name) are in tests/integration/web/test_api_limits.py;
this drives the handlers with the exceptions psycopg and the store raise."""

from __future__ import annotations

import warnings

import pytest
from fastapi import FastAPI
from sqlalchemy.exc import DataError

with warnings.catch_warnings():
    # Starlette 1.x announces a move of its TestClient to httpx2; httpx is what we have.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from cadenza.domain.errors import StoreError
from cadenza.web.api import errors


class _PsycopgDataError(Exception):
    pass


_NUL = _PsycopgDataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")


def _app() -> TestClient:
    app = FastAPI()
    errors.install(app)

    @app.get("/raw")
    def raw() -> None:
        raise DataError("INSERT ...", {}, _NUL)

    @app.get("/wrapped")
    def wrapped() -> None:
        try:
            raise DataError("SELECT ...", {}, _NUL)
        except DataError as exc:
            raise StoreError(f"store read failed: {exc.orig}") from exc

    @app.get("/other")
    def other() -> None:
        raise DataError("SELECT ...", {}, _PsycopgDataError("value too long"))

    @app.get("/store")
    def store() -> None:
        raise StoreError("store read failed: connection refused")

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("path", ["/raw", "/wrapped"])
def test_a_nul_byte_is_the_clients_error(path: str) -> None:
    answer = _app().get(path)
    assert answer.status_code == 422
    assert answer.json() == {"error": errors.NUL_MESSAGE}


def test_other_database_errors_stay_the_servers() -> None:
    client = _app()
    assert client.get("/other").status_code == 500
    store = client.get("/store")
    assert store.status_code == 503 and "connection refused" in store.json()["error"]
