"""A secret used by a connection, a proxy (a route's user:password) or a channel (an SMTP
password, a webhook URL's token) reaches no API response, SSE line, error body or access
log: a grep of everything captured, raw, base64 and URL-encoded (issue 15). The proxy, IP
echo, webhook and SMTP servers of the second test echo back what they were sent."""

from __future__ import annotations

import base64
import json
import logging
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import sqlalchemy as sa
from tests.integration.web.api_env import START, api_env
from tests.support.store_helpers import append_log

from cadenza.domain.states import RunState
from cadenza.store.tables import event_log, notification_log, resource_health, resources

SECRET = "s3cr3t+/Tok=en&x"  # changes under base64 and URL encoding


def forms(value: str) -> list[str]:
    raw = value.encode()
    return [value, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
            quote(value, safe=""), quote_plus(value)]


@pytest.mark.reliability_case(37)
def test_secret_appears_nowhere(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with api_env(tmp_path) as env:
        services = env.services
        services.secrets.set("ds_token", SECRET)
        settings = services.home.config_file
        settings.write_text(settings.read_text(encoding="utf-8").replace(
            'app = "demo_downstream:app"',
            'app = "demo_downstream:app"\n'
            'headers = { Authorization = "Bearer ${secret.ds_token}" }'),
            encoding="utf-8")
        services.config()  # loads the secret into the home's redactor, as a server does
        caplog.set_level(logging.INFO, logger="cadenza.access")
        editor, operator = env.session("editor"), env.session("operator")
        captured: list[str] = []

        def keep(answer: object) -> None:
            captured.append(answer.text)  # type: ignore[attr-defined]
            captured.append(str(answer.headers))  # type: ignore[attr-defined]

        keep(editor.get("/api/jobs"))
        keep(editor.get("/api/jobs/sales-load"))
        base = editor.get("/api/jobs/hello").json()["hash"]
        # a bad edit whose value is the secret: the located error must not echo it
        keep(editor.put("/api/jobs/hello", json={"base_hash": base, "definition": {
            "schedule": SECRET, "steps": [{"name": "c", "type": "python",
                                           "callable": "demo_tasks:count"}]}}))
        keep(editor.put("/api/jobs/hello", json={"base_hash": "stale", "definition": {
            "description": SECRET, "steps": []}}))
        run = operator.post("/api/jobs/sales-load/runs",
                            json={"params": {"period": SECRET}})
        keep(run)
        run_id = run.json()["run_id"]
        keep(operator.get("/api/runs"))
        keep(operator.get(f"/api/runs/{run_id}"))
        append_log(env.store, run_id, "INFO", f"calling downstream with Bearer {SECRET}")
        env.store.transition_run(run_id, RunState.CANCELED, reason=f"stopped {SECRET}")
        keep(operator.get(f"/api/runs/{run_id}/log", params={"follow": "1"}))
        keep(operator.get(f"/api/runs/{run_id}/log"))
        keep(operator.get("/api/events"))
        keep(operator.get(f"/api/runs/{quote(SECRET, safe='')}"))
        keep(operator.get("/api/events", params={"type": SECRET}))
        keep(operator.post("/api/login", json={"username": SECRET, "password": SECRET}))
        captured.extend(record.getMessage() for record in caplog.records)
        assert any("path=/api/runs/" in r.getMessage() for r in caplog.records)
        assert any("event: end" in text for text in captured)
        everything = "\n".join(captured)
        for form in forms(SECRET):
            assert form not in everything, form
    assert START  # the home ran on the fake clock


PROXY_PW = "pr0xy+Pw=d&y~1"  # a route's proxy password
SMTP_PW = "smtp+Pa55=w&z/2"  # an e-mail channel's password
HOOK = "h00k+T0k=en&q3"  # a webhook's URL path and header token


class _Echo(BaseHTTPRequestHandler):
    """A proxy, IP echo and webhook target that repeats what it was sent: its answers carry
    the credentials back, as a hostile or broken server's would."""

    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        seen = {"path": self.path, "headers": dict(self.headers.items())}
        if self.path.endswith("/echo"):  # the IP echo, through the "proxy": the credentials
            self._answer(200, {"ip": self.headers.get("Proxy-Authorization", "-")[:60],
                               "country": "FR", **seen})
        else:
            self._answer(200, seen)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer(500, {"path": self.path, "headers": dict(self.headers.items())})

    def log_message(self, format: str, *args: object) -> None:
        return


class _Smtp(socketserver.StreamRequestHandler):
    """An SMTP server that refuses every login, quoting the AUTH line it was sent."""

    def handle(self) -> None:
        self.wfile.write(b"220 echo ESMTP\r\n")
        for raw in self.rfile:
            line = raw.decode("latin-1").strip()
            verb = line.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self.wfile.write(b"250-echo\r\n250 AUTH PLAIN\r\n")
            elif verb == "AUTH":
                self.wfile.write(f"535 5.7.8 rejected {line} {SMTP_PW}\r\n".encode())
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"502 no\r\n")


@contextmanager
def _servers() -> Iterator[tuple[int, int]]:
    web = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    smtp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    smtp.daemon_threads = True
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (web, smtp)]
    for thread in threads:
        thread.start()
    try:
        yield web.server_address[1], smtp.server_address[1]
    finally:
        for server in (web, smtp):
            server.shutdown()
            server.server_close()


def _settings(web: int, smtp: int) -> str:
    return f'''
[pools.egress]
kind = "route"

[[pools.egress.members]]
id = "route-1"
proxy = "http://user:${{secret.proxy_pw}}@127.0.0.1:{web}"
region = "FR"

[pools.egress.health]
probe_url = "http://probe.test/ping"
ip_echo_url = "http://probe.test/echo"
interval = "1h"

[channels.echo-mail]
type = "email"
host = "127.0.0.1"
port = {smtp}
starttls = false
username = "cadenza"
password = "${{secret.smtp_pw}}"
sender = "cadenza@example.org"
timeout = "5s"

[channels.echo-hook]
type = "webhook"
url = "http://127.0.0.1:{web}/hooks/${{secret.hook_token}}"
headers = {{ X-Token = "${{secret.hook_token}}" }}
allow_private = true
timeout = "5s"
'''


def test_proxy_and_channel_secrets_appear_nowhere(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with _servers() as (web, smtp), api_env(tmp_path) as env:
        services = env.services
        for name, value in (("proxy_pw", PROXY_PW), ("smtp_pw", SMTP_PW),
                            ("hook_token", HOOK), ("ds_token", SECRET)):
            services.secrets.set(name, value)
        settings = services.home.config_file
        text = settings.read_text(encoding="utf-8").replace(
            'app = "demo_downstream:app"',
            'app = "demo_downstream:app"\n'
            'headers = { Authorization = "Bearer ${secret.ds_token}" }')
        settings.write_text(text + _settings(web, smtp), encoding="utf-8")
        services.config()  # loads the secrets into the home's redactor, as a server does
        caplog.set_level(logging.INFO, logger="cadenza.access")
        admin, operator = env.session("admin2"), env.session("operator")
        captured: list[str] = []

        def keep(answer: object) -> object:
            captured.append(answer.text)  # type: ignore[attr-defined]
            captured.append(str(answer.headers))  # type: ignore[attr-defined]
            return answer

        keep(operator.get("/api/resources"))
        probe = keep(operator.post("/api/resources/route-1/probe"))
        assert probe.status_code == 200, probe.text  # type: ignore[attr-defined]
        keep(operator.get("/api/resources/route-1"))
        keep(operator.get("/api/resources", params={"pool": "egress"}))
        keep(operator.get("/api/events", params={"resource": "route-1"}))
        mail = keep(admin.post("/api/channels/echo-mail/test", json={"to": ["a@example.org"]}))
        hook = keep(admin.post("/api/channels/echo-hook/test", json={}))
        for sent in (mail, hook):
            (delivery,) = sent.json()["deliveries"]  # type: ignore[attr-defined]
            assert delivery["state"] == "FAILED" and delivery["error"], delivery
        assert "rejected" in mail.json()["deliveries"][0]["error"]  # type: ignore[attr-defined]
        keep(operator.get("/api/notifications"))
        keep(operator.get("/api/notifications", params={"state": "FAILED"}))
        keep(operator.get("/api/jobs/sales-load"))
        keep(operator.get("/api/jobs"))
        run_id = operator.post("/api/jobs/hello/runs", json={}).json()["run_id"]
        append_log(env.store, run_id, "WARNING", f"via http://user:{PROXY_PW}@127.0.0.1:{web} "
                             f"to http://127.0.0.1:{web}/hooks/{HOOK} as cadenza/{SMTP_PW}")
        env.store.transition_run(run_id, RunState.CANCELED, reason=f"stopped {PROXY_PW}")
        keep(operator.get(f"/api/runs/{run_id}/log", params={"follow": "1"}))
        keep(operator.get(f"/api/runs/{run_id}"))
        keep(operator.get(f"/api/resources/{quote(PROXY_PW, safe='')}"))  # a 404 error body
        keep(admin.post(f"/api/channels/{quote(HOOK, safe='')}/test", json={}))
        keep(operator.get("/api/events"))
        captured.extend(record.getMessage() for record in caplog.records)
        assert any("event: end" in text for text in captured)
        everything = "\n".join(captured)
        for secret in (PROXY_PW, SMTP_PW, HOOK, SECRET):
            for form in forms(secret):
                assert form not in everything, (secret, form)
        # what the probe and the deliveries stored holds no secret either (the proxy's
        # echo of its Proxy-Authorization was kept as the route's egress IP once)
        with env.store.read() as c:
            stored = "\n".join(str(c.execute(sa.select(table)).all()) for table in (
                event_log, resource_health, resources, notification_log))
        for secret in (PROXY_PW, SMTP_PW, HOOK):
            for form in forms(secret):
                assert form not in stored, (secret, form)
        for blob in (f"user:{PROXY_PW}", f"\0cadenza\0{SMTP_PW}"):  # Basic / AUTH PLAIN
            encoded = base64.b64encode(blob.encode()).decode()
            assert encoded not in everything and encoded not in stored, blob
        assert "is not an IP address" in stored
