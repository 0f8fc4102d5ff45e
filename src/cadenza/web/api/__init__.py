"""The REST API: FastAPI routers over :mod:`cadenza.services` (docs/api.md)."""

from __future__ import annotations

from fastapi import FastAPI

from cadenza.web import metrics
from cadenza.web.api import errors, jobs, resources, runs, session


def install(app: FastAPI) -> None:
    """Add every API router and the JSON error handlers to ``app``."""
    errors.install(app)
    app.include_router(session.router)
    app.include_router(jobs.router)
    app.include_router(runs.router)
    app.include_router(resources.router)
    app.include_router(metrics.router)
