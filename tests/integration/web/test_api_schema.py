"""Schemathesis over /api/openapi.json with a valid admin token, on SQLite and PostgreSQL:
no 5xx, and no answer that contradicts the schema (status, content type, body). Every
check but "a schema-valid request is accepted": the API refuses such requests on meaning
(an unknown job, a stale hash), with a documented 4xx."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance
from tests.integration.web.api_env import api_env

from cadenza.services.tokens import TokenService

EXAMPLES = 12  # per operation: ~30 operations on two stores within the time budget


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_openapi_conformance(tmp_path: Path, backend: str,
                             request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    with api_env(tmp_path, store_url=url) as env:
        token = TokenService(env.store).create("fuzz", "admin", username="admin2",
                                               actor="test").token
        auth = {"Authorization": f"Bearer {token}"}
        schema = schemathesis.openapi.from_asgi("/api/openapi.json", env.client.app,
                                                headers=auth)
        failures: list[str] = []
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 25
        for operation in operations:
            if operation.path in ("/api/logout", "/api/tokens/{name}") \
                    or operation.path.startswith("/api/users"):
                continue  # would end the fuzzing's own session, token or user

            @settings(max_examples=EXAMPLES, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy())
            def check(case: schemathesis.Case) -> None:
                # A schema-valid request may still be refused on meaning (a job id that
                # does not exist, a stale hash, an unknown state name): 4xx, documented.
                case.call_and_validate(headers=auth, excluded_checks=[positive_data_acceptance])

            try:
                check()
            except (Exception, BaseExceptionGroup) as exc:  # collect every failure
                failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
        assert not failures, "\n\n".join(failures)
