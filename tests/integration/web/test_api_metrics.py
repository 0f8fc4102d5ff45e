"""``/metrics``: never open by default; ``[server] metrics_allow`` lets listed addresses and
networks scrape it without a token; a token works from anywhere (issue 15 item 3)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.web.api_env import ORIGIN, TestClient, api_env
from tests.integration.web.served import client, make_home, served

from cadenza.services.tokens import TokenService
from cadenza.web.app import create_app


def _from(app: object, address: str) -> TestClient:
    return TestClient(app, base_url=ORIGIN, client=(address, 40000))  # type: ignore[arg-type]


def test_metrics_allow_list(tmp_path: Path) -> None:
    with api_env(tmp_path) as env:
        store = env.store
        token = TokenService(store).create("prom", "viewer", actor="test").token
        closed = env.client.app
        for address in ("127.0.0.1", "10.1.2.3", "::1"):  # never open by default
            assert _from(closed, address).get("/metrics").status_code == 401, address
        app = create_app(store, home=env.services.home,
                         metrics_allow=["127.0.0.1", "10.0.0.0/8", "fd00::/8"])
        for address in ("127.0.0.1", "10.1.2.3", "10.255.0.1", "fd00::5", "::ffff:10.0.0.9"):
            answer = _from(app, address).get("/metrics")
            assert answer.status_code == 200, address
            assert "cadenza_queue_depth" in answer.text
        for address in ("127.0.0.2", "11.0.0.1", "192.168.1.10", "::1", "testclient"):
            answer = _from(app, address).get("/metrics")
            assert answer.status_code == 401, address
            assert answer.headers["www-authenticate"] == "Bearer"
        # a token works as before, from anywhere, listed or not
        for address in ("192.168.1.10", "10.1.2.3"):
            scraper = _from(app, address)
            scraper.headers["Authorization"] = f"Bearer {token}"
            assert scraper.get("/metrics").status_code == 200
        # a wrong token from a listed address is still refused: credentials are checked
        wrong = _from(app, "10.1.2.3")
        wrong.headers["Authorization"] = "Bearer cdz_wrong"
        assert wrong.get("/metrics").status_code == 401
        # the allow-list opens /metrics only
        assert _from(app, "10.1.2.3").get("/api/stats").status_code == 401
        assert _from(app, "10.1.2.3").get("/api/runs").status_code == 401


def test_metrics_allow_from_the_settings(tmp_path: Path) -> None:
    home = make_home(tmp_path, 'metrics_allow = ["127.0.0.1"]\n')
    with served(home) as server, client(f"http://127.0.0.1:{server.port}") as http:
        scraped = http.get("/metrics")
        assert scraped.status_code == 200
        assert http.get("/api/runs").status_code == 401
        # the answering node's own figures, beside the store's (this node has no
        # scheduler: no leader gauge, and a null leader in its health)
        assert "cadenza_clock_skew_seconds " in scraped.text
        assert "cadenza_scheduler_leader" not in scraped.text
        health = http.get("/api/health").json()
        assert health["leader"] is None and abs(health["clock_skew_seconds"]) < 5
    with served(make_home(tmp_path / "closed")) as server, \
            client(f"http://127.0.0.1:{server.port}") as http:
        assert http.get("/metrics").status_code == 401
