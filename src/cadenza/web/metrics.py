"""``GET /metrics``: Prometheus text, computed from the store at each scrape.

Never open: it needs a token or session like every route (viewer role). Families:
``cadenza_runs`` (gauge: runs in the store by job and state), ``cadenza_queue_depth``
(QUEUED runs), ``cadenza_run_duration_seconds`` (histogram of the execution time of the
runs finished in the last 24 hours, by job). A collector reads the store at scrape time, so
every node answers the same figures and nothing is kept in memory between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from cadenza.store import Store
from cadenza.store.tables import runs
from cadenza.web.api.errors import ERROR_RESPONSES
from cadenza.web.auth import AsViewer, context

router = APIRouter(tags=["metrics"], responses=ERROR_RESPONSES)
BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StoreCollector(Collector):
    """The store's figures as Prometheus families (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        since = self.store.clock.now() - timedelta(hours=24)
        with self.store.read() as c:
            counts = c.execute(sa.select(runs.c.job_id, runs.c.state, sa.func.count())
                               .group_by(runs.c.job_id, runs.c.state)).all()
            ended = c.execute(sa.select(runs.c.job_id, runs.c.started_at, runs.c.finished_at)
                              .where(runs.c.finished_at >= since,
                                     runs.c.started_at.is_not(None))).all()
        gauge = GaugeMetricFamily("cadenza_runs", "Runs in the store by job and state",
                                  labels=["job", "state"])
        queued = 0
        for job, state, count in counts:
            gauge.add_metric([job, state], count)
            queued += count if state == "QUEUED" else 0
        yield gauge
        yield GaugeMetricFamily("cadenza_queue_depth", "Runs waiting (QUEUED)", value=queued)
        histogram = HistogramMetricFamily(
            "cadenza_run_duration_seconds",
            "Execution time of the runs finished in the last 24 hours", labels=["job"])
        by_job: dict[str, list[float]] = {}
        for job, started, finished in ended:
            by_job.setdefault(job, []).append((finished - started).total_seconds())
        for job, values in sorted(by_job.items()):
            buckets = [(str(edge), sum(v <= edge for v in values)) for edge in BUCKETS]
            buckets.append(("+Inf", len(values)))
            histogram.add_metric([job], buckets, sum_value=sum(values))
        yield histogram


@router.get("/metrics", response_class=Response)
def metrics(principal: AsViewer, request: Request) -> Response:
    """Prometheus metrics (needs a token: ``Authorization: Bearer cdz_…``, viewer role)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(context(request).store))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)
