"""The HTTP application. For now: ``/api/health`` (no auth, exact path) and the demo endpoint.

The REST API and the UI come next, as thin shells over :mod:`cadenza.services`; every
route but the health check will require auth.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

import cadenza
from cadenza.services.health import check_health
from cadenza.store import Store


def create_app(store: Store) -> FastAPI:
    """Build the app around an open store (the caller owns and closes it)."""
    app = FastAPI(
        title="Cadenza",
        version=cadenza.__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )

    @app.get("/api/health")
    def health() -> JSONResponse:
        """Liveness, store reachability and whether the store's writes work; needs no
        login. HTTP 503 with ``"status": "degraded"`` and a ``reason`` when not
        (docs/serve.md)."""
        health = check_health(store)
        return JSONResponse(health.as_json(), status_code=200 if health.ok else 503)

    return app
