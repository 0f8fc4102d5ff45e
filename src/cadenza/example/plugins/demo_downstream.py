"""The demo's downstream service, answering in-process: no server, no network.

``[connections.downstream]`` in cadenza.toml names it with ``app = "demo_downstream:app"``,
so the ``tell-downstream`` step of ``sales-load`` reaches this WSGI application through
httpx's WSGI transport. A real install sets ``base_url`` to its own service and removes
``app``.

``POST /refresh`` with a JSON object answers 200 ``{"accepted": true, "period": ...,
"rows": ..., "idempotency_key": ...}``; a body that is not a JSON object answers 400,
another method 405, another path 404.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

MAX_BODY = 1024 * 1024


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI entry point."""
    if environ.get("PATH_INFO", "") != "/refresh":
        return _answer(start_response, "404 Not Found", {"error": "no such endpoint"})
    if environ.get("REQUEST_METHOD") != "POST":
        return _answer(start_response, "405 Method Not Allowed", {"error": "use POST"},
                       [("Allow", "POST")])
    try:
        length = min(int(environ.get("CONTENT_LENGTH") or 0), MAX_BODY)
        payload = json.loads(environ["wsgi.input"].read(length) or b"null")
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return _answer(start_response, "400 Bad Request", {"error": "expected a JSON object"})
    return _answer(start_response, "200 OK", {
        "accepted": True,
        "period": payload.get("period"),
        "rows": payload.get("rows"),
        "idempotency_key": environ.get("HTTP_IDEMPOTENCY_KEY"),
    })


def _answer(start_response: StartResponse, status: str, body: dict[str, Any],
            extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    data = json.dumps(body).encode("utf-8")
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data))), *(extra or [])])
    return [data]
