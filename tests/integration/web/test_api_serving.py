"""Serving settings of ``[server]`` over a real uvicorn (issue 15 item 4): TLS from
``tls_cert``/``tls_key`` with Secure cookies, proxy headers believed only from
``trusted_proxies``, the warning for a network address, and located errors for bad files."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from tests.integration.web.served import PASSWORD, client, make_home, self_signed, served
from tests.support.store_helpers import login_failures_since

from cadenza.config.loader import validate_settings_text
from cadenza.server import exposure_warning

TLS = 'tls_cert = "tls/cert.pem"\ntls_key = "tls/key.pem"\n'
FORWARDED = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}


def _cookies(answer: httpx.Response) -> list[str]:
    return answer.headers.get_list("set-cookie")


def test_tls_serves_https_with_secure_cookies(tmp_path: Path) -> None:
    home = make_home(tmp_path, TLS)
    cert, _key = self_signed(home / "tls")
    with served(home, host="0.0.0.0") as server:
        assert server.tls and server.warning is None  # TLS: no warning on 0.0.0.0
        assert server.url.startswith("https://")
        base = f"https://127.0.0.1:{server.port}"
        with client(base, cert) as https:
            assert https.get("/api/health").status_code == 200
            login = https.post("/api/login", json={"username": "admin2",
                                                   "password": PASSWORD})
            assert login.status_code == 200, login.text
            cookies = _cookies(login)
            assert len(cookies) == 2 and all("Secure" in c for c in cookies), cookies
            assert any(c.startswith("cadenza_session=") and "HttpOnly" in c for c in cookies)
            assert https.get("/api/me").json()["username"] == "admin2"
            out = https.post("/api/logout", headers={
                "X-CSRF-Token": login.json()["csrf_token"], "Origin": base})
            assert out.status_code == 204, out.text  # the Origin check knows it is https
        with pytest.raises(httpx.HTTPError), \
                httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as plain:
            plain.get("/api/health")


def test_plain_http_on_the_network_warns(tmp_path: Path) -> None:
    with served(make_home(tmp_path), host="0.0.0.0") as server:
        warning = server.warning
        assert warning is not None and "tls_cert" in warning and "trusted_proxies" in warning
        assert server.url.startswith("http://")
        with client(f"http://127.0.0.1:{server.port}") as http:
            login = http.post("/api/login", json={"username": "viewer", "password": PASSWORD})
            assert login.status_code == 200
            assert not any("Secure" in c for c in _cookies(login))
    assert exposure_warning("127.0.0.1", tls=False, proxied=False) is None
    assert exposure_warning("::1", tls=False, proxied=False) is None
    assert exposure_warning("10.0.0.5", tls=True, proxied=False) is None
    assert exposure_warning("10.0.0.5", tls=False, proxied=True) is None
    assert exposure_warning("cadenza.example.com", tls=False, proxied=False) is not None


@pytest.mark.parametrize("trusted", [False, True])
def test_proxy_headers_only_from_trusted_proxies(tmp_path: Path, trusted: bool,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    lines = 'trusted_proxies = ["127.0.0.0/8", "::1"]\n' if trusted else ""
    caplog.set_level(logging.INFO, logger="cadenza.access")
    with served(make_home(tmp_path, lines)) as server:
        assert server.proxied is trusted
        with client(f"http://127.0.0.1:{server.port}") as http:
            bad = http.post("/api/login", json={"username": "viewer", "password": "nope"},
                            headers=FORWARDED)
            assert bad.status_code == 401
            good = http.post("/api/login", json={"username": "viewer", "password": PASSWORD},
                             headers=FORWARDED)
            assert good.status_code == 200
        store = server.services.store()
        since = store.clock.now() - timedelta(hours=1)
        seen = "203.0.113.7" if trusted else "127.0.0.1"
        other = "127.0.0.1" if trusted else "203.0.113.7"
        # the address login throttling counts is the forwarded one only from a trusted proxy
        assert login_failures_since(store, "viewer", seen, since)[1] == 1
        assert login_failures_since(store, "viewer", other, since)[1] == 0
        # so is the access log's, and https (a Secure cookie) from X-Forwarded-Proto
        logins = [r.getMessage() for r in caplog.records if "path=/api/login" in r.getMessage()]
        assert logins and all(f"client={seen}" in line for line in logins), logins
        assert all("Secure" in c for c in _cookies(good)) is trusted


def _settings(home: Path, lines: str) -> list[str]:
    text = (home / "cadenza.toml").read_text(encoding="utf-8")
    return [str(p) for p in validate_settings_text(
        home, text.replace("[server]\n", "[server]\n" + lines, 1)) if p.is_error]


def test_bad_tls_files_and_addresses_are_located_errors(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    missing = _settings(home, TLS)
    assert any(p.startswith("cadenza.toml:5:") and "server.tls_cert" in p
               and "no TLS certificate file at" in p for p in missing), missing
    assert any("server.tls_key" in p and "no TLS private key file" in p for p in missing)
    cert, key = self_signed(home / "tls")
    assert _settings(home, TLS) == []
    _other_cert, other_key = self_signed(home / "other")
    mismatched = _settings(home, 'tls_cert = "tls/cert.pem"\ntls_key = "other/key.pem"\n')
    assert any("server.tls_key" in p and "do not load as a pair" in p
               for p in mismatched), mismatched
    assert other_key.read_text() not in "\n".join(mismatched)
    alone = _settings(home, f'tls_cert = "{cert}"\n')
    assert any("both tls_cert and tls_key" in p for p in alone), alone
    bad_net = _settings(home, 'trusted_proxies = ["10.0.0.0/33"]\n'
                              'metrics_allow = ["everyone"]\n')
    assert any("server.trusted_proxies[0]" in p for p in bad_net), bad_net
    assert any("server.metrics_allow[0]" in p and "network" in p for p in bad_net), bad_net
    key.chmod(0o644)
    loose = [str(p) for p in validate_settings_text(home, (home / "cadenza.toml").read_text(
        encoding="utf-8").replace("[server]\n", "[server]\n" + TLS, 1)) if not p.is_error]
    assert any("server.tls_key" in p and "chmod 600" in p for p in loose), loose


def test_loopback_metrics_allow_without_trusted_proxies_warns(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    text = (home / "cadenza.toml").read_text(encoding="utf-8")

    def warnings(lines: str) -> list[str]:
        problems = validate_settings_text(home, text.replace("[server]\n", "[server]\n" + lines))
        return [str(p) for p in problems if not p.is_error and "metrics_allow" in p.path]

    found = warnings('metrics_allow = ["10.0.0.0/8", "127.0.0.1"]\n')
    assert len(found) == 1 and "server.metrics_allow[1]" in found[0] \
        and "trusted_proxies" in found[0], found
    assert warnings('metrics_allow = ["10.0.0.0/8"]\n') == []
    assert warnings('metrics_allow = ["127.0.0.1"]\ntrusted_proxies = ["127.0.0.1"]\n') == []


def test_a_dead_http_server_stops_the_serve_at_once(tmp_path: Path) -> None:
    """The HTTP server's thread says itself that it ended without being told to: the main
    thread, asleep until the stop (no periodic look), wakes at once and reports it; a stop
    asked for is no death."""
    told: list[str] = []
    with served(make_home(tmp_path)) as server:
        assert server.web is not None
        server.web.should_exit = True  # uvicorn ends as after a crash of its loop
        started = time.monotonic()
        assert server.run_until_stopped(lambda: told.append("died")) is True
        assert time.monotonic() - started < 5
        assert told == ["died"] and server.stop_event.is_set()
    with served(make_home(tmp_path / "again")) as server:
        stopper = threading.Timer(0.2, server.stop_event.set)  # what SIGTERM's handler does
        stopper.start()
        assert server.run_until_stopped(lambda: told.append("died")) is False
        assert told == ["died"] and server.web_died is False
