"""``GET /metrics``: Prometheus text, computed from the store at each scrape.

Never open by default: it needs a token or session like every route (viewer role), except
from the addresses and networks of ``[server] metrics_allow`` (``["127.0.0.1",
"10.0.0.0/8"]``), which may scrape it without one. The address is the peer's, or the
forwarded client's when the peer is one of ``[server] trusted_proxies``. Families:
``cadenza_runs`` (gauge: runs in the store by job and state), ``cadenza_queue_depth``
(QUEUED runs), ``cadenza_run_duration_seconds`` (histogram of the execution time of the
runs finished in the last 24 hours, by job), ``cadenza_pool_members`` (gauge: members of
each pool by state: AVAILABLE, LEASED, RUNNING, COOLDOWN, FAULT, DISABLED). A collector
reads the store at scrape time, so every node answers the same figures and nothing is kept
in memory between scrapes. Two families are the node's own: ``cadenza_clock_skew_seconds``
(how far its clock runs ahead of the store's time; negative: behind) and
``cadenza_scheduler_leader`` (1 on the node that fires schedules).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from cadenza.domain.states import ResourceState
from cadenza.services.auth import Principal
from cadenza.services.health import NodeStatus
from cadenza.store.protocols import Transactions
from cadenza.store.stats import ended_since, pool_counts, run_counts
from cadenza.web.api.errors import ERROR_RESPONSES
from cadenza.web.auth import SESSION_COOKIE, VIEWER, context

router = APIRouter(tags=["metrics"], responses=ERROR_RESPONSES)
BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StoreCollector(Collector):
    """The store's figures as Prometheus families (see the module docstring)."""

    def __init__(self, store: Transactions) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        since = self.store.clock.now() - timedelta(hours=24)
        counts = run_counts(self.store)
        ended = ended_since(self.store, since)
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
        yield self._pools()

    def _pools(self) -> Metric:
        """``cadenza_pool_members{pool,state}``: every state of every pool, 0 included
        (a series that comes and goes breaks rates and alerts)."""
        counts = {(pool, state): count for pool, state, count in pool_counts(self.store)}
        gauge = GaugeMetricFamily("cadenza_pool_members", "Pool members by state",
                                  labels=["pool", "state"])
        for pool in sorted({pool for pool, _state in counts}):
            for state in ResourceState:
                gauge.add_metric([pool, state.value], counts.get((pool, state.value), 0))
        return gauge


class NodeCollector(Collector):
    """The figures of the node that answers (see the module docstring)."""

    def __init__(self, status: Callable[[], NodeStatus]) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        node = self.status()
        if node.clock_skew_seconds is not None:
            yield GaugeMetricFamily(
                "cadenza_clock_skew_seconds",
                "How far this node's clock runs ahead of the store's time (negative: behind)",
                value=node.clock_skew_seconds)
        if node.leader is not None:
            yield GaugeMetricFamily("cadenza_scheduler_leader",
                                    "1 when this node fires the schedules",
                                    value=1.0 if node.leader else 0.0)


def allowed_address(request: Request) -> bool:
    """True when the caller's address is in ``[server] metrics_allow``."""
    networks = context(request).metrics_allow
    if not networks or request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def metrics_access(request: Request) -> Principal | None:
    """A caller from ``metrics_allow`` without credentials, else a viewer or above."""
    if allowed_address(request) and "authorization" not in request.headers \
            and SESSION_COOKIE not in request.cookies:
        request.state.cadenza_principal = "metrics_allow"  # for the access log
        return None
    return VIEWER.check(request)  # type: ignore[attr-defined, no-any-return]


metrics_access.required_role = "viewer"  # type: ignore[attr-defined]  # read by the route walk


@router.get("/metrics", response_class=Response)
def metrics(principal: Annotated[Principal | None, Depends(metrics_access)],
            request: Request) -> Response:
    """Prometheus metrics (a token: ``Authorization: Bearer cdz_…``, viewer role; or no
    token from an address of ``[server] metrics_allow``)."""
    registry = CollectorRegistry(auto_describe=False)
    web = context(request)
    registry.register(StoreCollector(web.store))
    if web.node_status is not None:
        registry.register(NodeCollector(web.node_status))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)
