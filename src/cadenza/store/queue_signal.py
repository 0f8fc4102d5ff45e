"""PostgreSQL: a node hears at once that a run was queued, by any process or node.

A trigger of ``runs`` (migration 0024) sends ``NOTIFY cadenza_queued`` whenever a row
becomes QUEUED: a new run (the API, the CLI, a scheduler's fire, a ``call_job`` child) or a
run queued again (a retry, the reaper, an operator). PostgreSQL delivers it when that
transaction commits, once per transaction, to every session that listens.

Each dispatcher listens on a connection of its own (:class:`QueueListener`, one thread,
asleep on the connection's socket). A notification wakes the dispatcher at once, where it
used to find such a run at its next once-a-second poll; and an idle dispatcher's poll
skips its read of the queue while nothing was signalled since a read found it empty (the
counterpart of SQLite's ``data_version``, :class:`~cadenza.store.admission.QueueWatch`).

Nothing depends on a notification arriving: while the listening connection is down (the
server restarted, the network dropped it) every poll reads the queue as before, and the
listener connects again after 1, 2, 5, then every 10 seconds, then signals once (what was
queued meanwhile was not heard). Silence is trusted only once the listener has heard a
probe of its own, sent through another connection of the store after each LISTEN: behind
a proxy that pools transactions (PgBouncer's ``transaction`` mode), which delivers no
notification to an idle client, the probe is never heard, a warning says so, and every
poll reads the queue as it did before. Even when trusted, an idle poll reads the queue
at least every :data:`LOOK_AT_LEAST` seconds.
"""

from __future__ import annotations

import logging
import secrets
import select
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("cadenza.store")

CHANNEL = "cadenza_queued"
"""The notification channel the trigger of ``runs`` signals (migration 0024)."""

LOOK_AT_LEAST = 30.0
"""Seconds after which an idle poll reads the queue even though nothing was signalled."""

PING_AFTER = 30.0
"""Seconds of silence after which the listener checks its connection (``SELECT 1``): a
connection the network dropped without a word is found within about this time, not at the
next signal that never comes."""

PROBE_WAIT = 10.0
"""Seconds after a LISTEN within which the listener's probe must be heard, else a warning
says that notifications do not arrive (and silence stays untrusted)."""

RECONNECT_DELAYS = (1.0, 2.0, 5.0, 10.0)
"""Seconds between attempts to listen again after the connection failed (the last
repeats)."""


class QueueListener:
    """LISTEN on :data:`CHANNEL` in a thread of its own; ``on_signal()`` for each
    notification, and once after each (re)connection.

    :attr:`token` says what was heard: a number that changes with every signal, or
    ``None`` while not listening or before its probe was heard (then nothing may be
    concluded from silence)."""

    def __init__(self, engine: sa.Engine, on_signal: Callable[[], None]) -> None:
        self._engine = engine
        args, params = engine.dialect.create_connect_args(engine.url)
        params = {k: v for k, v in params.items() if k != "context"}
        params.setdefault("connect_timeout", 10)
        params["application_name"] = "cadenza listen"
        self._connect_args: tuple[list[Any], dict[str, Any]] = (list(args), params)
        self._on_signal = on_signal
        self._signals = 0
        self._listening = False
        self._probe = ""
        """The payload of this connection's probe; "" once it was heard."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # A socket pair wakes the thread out of select() to stop it (sockets: select() on
        # Windows takes nothing else).
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="cadenza-queue-listener",
                                        daemon=True)
        self._thread.start()

    @property
    def token(self) -> int | None:
        with self._lock:
            return self._signals if self._listening and not self._probe else None

    def close(self, timeout: float = 5.0) -> None:
        """Stop listening and close the connection (waits for the thread)."""
        self._stopping.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout)
        self._wake_r.close()
        self._wake_w.close()

    def _signal(self, count: int = 1) -> None:
        with self._lock:
            self._signals += count
        try:
            self._on_signal()
        except Exception:  # the waker must not kill the listener
            log.exception("waking the dispatcher on a queued run failed")

    def _run(self) -> None:
        import psycopg  # here: a SQLite home never loads the driver

        failures = 0
        while not self._stopping.is_set():
            conn: psycopg.Connection[Any] | None = None
            try:
                args, params = self._connect_args
                conn = psycopg.connect(*args, autocommit=True, **params)
                conn.execute(f"LISTEN {CHANNEL}")
                probe = secrets.token_hex(8)
                with self._lock:
                    self._listening = True
                    self._probe = probe
                if failures:
                    log.info("listening for queued runs again")
                failures = 0
                self._send_probe(probe)
                self._signal()  # whatever was queued while not listening
                self._listen(conn)
            except Exception as exc:  # the server, the network, or a bug: never die
                self._deaf(conn)
                if self._stopping.is_set():
                    break
                if failures == 0 and isinstance(exc, psycopg.Error):
                    log.warning("not listening for queued runs (the once-a-second poll "
                                "reads the queue meanwhile): %s", exc)
                elif failures == 0:
                    log.exception("not listening for queued runs (the once-a-second poll "
                                  "reads the queue meanwhile)")
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                self._stopping.wait(delay)
            finally:
                self._deaf(conn)

    def _send_probe(self, probe: str) -> None:
        """NOTIFY the channel with ``probe`` through a connection of the store's pool: heard
        back, it shows that notifications from other sessions reach this one."""
        try:
            with self._engine.connect() as conn:
                conn.execute(sa.select(sa.func.pg_notify(CHANNEL, probe)))
                conn.commit()
        except sa.exc.SQLAlchemyError as exc:  # then silence stays untrusted
            log.warning("could not check that notifications of queued runs arrive: %s", exc)

    def _heard(self, payloads: list[str]) -> None:
        with self._lock:
            if self._probe and self._probe in payloads:
                self._probe = ""

    def _deaf(self, conn: psycopg.Connection[Any] | None) -> None:
        with self._lock:
            self._listening = False
        if conn is not None:
            conn.close()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        waited = 0.0
        while not self._stopping.is_set():
            wait = PING_AFTER if not self.probing else min(PING_AFTER, PROBE_WAIT - waited)
            ready, _, _ = select.select([conn.fileno(), self._wake_r.fileno()], [], [],
                                        max(wait, 0.0))
            if self._stopping.is_set():
                return
            if not ready:
                if self.probing:
                    waited += wait
                    if waited >= PROBE_WAIT:
                        log.warning(
                            "notifications of queued runs do not arrive (a proxy that pools "
                            "transactions, such as PgBouncer in transaction mode?): runs "
                            "queued by other processes or nodes are found by the "
                            "once-a-second poll")
                        waited = -float("inf")  # said once per connection
                conn.execute("SELECT 1")  # raises if the connection is gone
                continue
            payloads = [n.payload for n in conn.notifies(timeout=0)]
            if payloads:
                self._heard(payloads)
                self._signal(len(payloads))

    @property
    def probing(self) -> bool:
        """Whether this connection's probe is still to be heard."""
        with self._lock:
            return bool(self._probe)
