"""Run requests with an ``Idempotency-Key`` (docs/api.md): one run per caller and key.

The key's row goes into the store (``idempotency_keys``, primary key caller + key) before
the run is created: of concurrent requests with one key, on any number of threads,
processes or nodes, exactly one inserts it and creates the run; the others find the row,
wait for its run and answer with it. The same key with another body is refused
(InvalidRequest, 422); a first request whose run could not be created releases the key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cadenza.services.errors import InvalidRequest, Refused

if TYPE_CHECKING:
    from cadenza.services.context import Services
    from cadenza.services.runs import RunRequestInput

MAX_KEY_LENGTH = 200
WAIT_SECONDS = 10.0
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class KeyedRun:
    """The run of a request: ``created`` False when an earlier request with the key made it."""

    run_id: str
    created: bool


def body_hash(job_id: str, body: Mapping[str, Any]) -> str:
    """The SHA-256 of the job and the request body in a canonical JSON form."""
    text = json.dumps({"job": job_id, "body": body}, sort_keys=True, separators=(",", ":"),
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def enqueue_once(services: Services, owner: str, key: str, request: RunRequestInput,
                 digest: str) -> KeyedRun:
    """Enqueue ``request`` once for (``owner``, ``key``); see the module docstring."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidRequest(f"Idempotency-Key: use 1 to {MAX_KEY_LENGTH} printable "
                             "characters")
    services.runs.check(request)  # a bad request reserves nothing
    store = services.store()
    first, row = store.reserve_idempotency_key(owner, key, request.job_id, digest)
    if not first:
        return KeyedRun(_await_run(services, owner, key, row.body_hash, digest), False)
    try:
        run_id = services.runs.enqueue(request)
    except BaseException:
        store.release_idempotency_key(owner, key)
        raise
    store.complete_idempotency_key(owner, key, run_id)
    return KeyedRun(run_id, True)


def _await_run(services: Services, owner: str, key: str, first_hash: str,
               digest: str) -> str:
    if first_hash != digest:
        raise InvalidRequest("Idempotency-Key: this key was used with another request "
                             "body; use a new key for a new request")
    clock, store = services.clock, services.store()
    deadline = clock.monotonic() + WAIT_SECONDS
    while True:
        row = store.get_idempotency_key(owner, key)
        if row is not None and row.run_id is not None:
            return row.run_id
        if row is None or clock.monotonic() >= deadline:
            raise Refused("Idempotency-Key: the first request with this key has not "
                          "created its run yet; try again")
        clock.sleep(POLL_SECONDS)
