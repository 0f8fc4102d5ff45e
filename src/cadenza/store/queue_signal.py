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
queued meanwhile was not heard). Even while connected, an idle poll reads the queue at
least every :data:`LOOK_AT_LEAST` seconds.
"""

from __future__ import annotations

import logging
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

RECONNECT_DELAYS = (1.0, 2.0, 5.0, 10.0)
"""Seconds between attempts to listen again after the connection failed (the last
repeats)."""


class QueueListener:
    """LISTEN on :data:`CHANNEL` in a thread of its own; ``on_signal()`` for each
    notification, and once after each (re)connection.

    :attr:`token` says what was heard: a number that changes with every signal, or
    ``None`` while not listening (then nothing may be concluded from silence)."""

    def __init__(self, engine: sa.Engine, on_signal: Callable[[], None]) -> None:
        args, params = engine.dialect.create_connect_args(engine.url)
        params = {k: v for k, v in params.items() if k != "context"}
        params.setdefault("connect_timeout", 10)
        params["application_name"] = "cadenza listen"
        self._connect_args: tuple[list[Any], dict[str, Any]] = (list(args), params)
        self._on_signal = on_signal
        self._signals = 0
        self._listening = False
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
            return self._signals if self._listening else None

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
                with self._lock:
                    self._listening = True
                if failures:
                    log.info("listening for queued runs again")
                failures = 0
                self._signal()  # whatever was queued while not listening
                self._listen(conn)
            except psycopg.Error as exc:
                self._deaf(conn)
                if self._stopping.is_set():
                    break
                if failures == 0:
                    log.warning("not listening for queued runs (the once-a-second poll "
                                "reads the queue meanwhile): %s", exc)
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                self._stopping.wait(delay)
            finally:
                self._deaf(conn)

    def _deaf(self, conn: psycopg.Connection[Any] | None) -> None:
        with self._lock:
            self._listening = False
        if conn is not None:
            conn.close()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        while not self._stopping.is_set():
            ready, _, _ = select.select([conn.fileno(), self._wake_r.fileno()], [], [],
                                        PING_AFTER)
            if self._stopping.is_set():
                return
            if not ready:
                conn.execute("SELECT 1")  # raises if the connection is gone
                continue
            heard = sum(1 for _ in conn.notifies(timeout=0))
            if heard:
                self._signal(heard)
