"""``stats(since)``: the dashboard's figures over a window (``cadenza stats``,
``GET /api/stats``); see :mod:`cadenza.store.stats` and :mod:`cadenza.store.pool_stats`
for what is counted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadenza.services.history import parse_since

if TYPE_CHECKING:
    from cadenza.clock import Clock
    from cadenza.store.protocols import Transactions
    from cadenza.store.stats import RunSeries, RunStats

DEFAULT_WINDOW = "7d"


def stats(store: Transactions, clock: Clock, since: str | None = None) -> RunStats:
    """The figures of the runs created since ``since`` (an age like ``7d`` or an ISO time;
    default 7 days); InvalidRequest for a bad ``since``."""
    from dataclasses import replace

    from cadenza.store.pool_stats import pool_stats
    from cadenza.store.stats import run_stats

    now = clock.now()
    start = parse_since(since or DEFAULT_WINDOW, now)
    return replace(run_stats(store, start), pools=pool_stats(store, start, now))


def series(store: Transactions, clock: Clock, window: str) -> RunSeries:
    """The dashboard's charts over ``window`` (``24h``: hourly buckets, ``7d``: 6-hourly)."""
    from datetime import timedelta

    from cadenza.store.stats import run_series

    step = timedelta(hours=1) if window == "24h" else timedelta(hours=6)
    now = clock.now()
    since = parse_since(window, now)
    return run_series(store, since.replace(minute=0, second=0, microsecond=0), now, step)
