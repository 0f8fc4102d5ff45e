"""A process of its own that writes a staged burst's chunks (SQLite).

At a crowded due time the node's dispatcher writes the claim of the staged runs chunk by
chunk while the step threads start the runs already claimed (executor/staging.py). In one
process both share one interpreter lock, and the dispatcher waits for it while the step
threads run. A :class:`Claimer` is a child process (``spawn``: the same on Windows) with its
own connection to the same SQLite file: the node hands it a stage's encoded claims ahead of
the due time (:meth:`Claimer.submit`, off the critical path) and, at the due time, after the
node claimed the first chunk itself, tells it to write the next ones (:meth:`Claimer.claim`).
Each of its chunks is one ``BEGIN IMMEDIATE`` transaction that first checks the runs'
version counter (:meth:`~cadenza.store.claims.RunClaims.runs_version`: bumped by a trigger
with every write that queues, cancels, claims, ends or re-queues a run, and SQLite has one
writer, so an unchanged version means that the node's admission decision still holds), then
writes the claim (:meth:`~cadenza.store.claims.RunClaims.claim_staged`, the same claim as
everywhere). It reports each chunk as it commits; the node starts those runs meanwhile. When
the version moved, the claimer stops and the node goes on with its own chunks, which check
everything again (the runs due, the load) and may drop the stage for the ordinary path.

What it never does: decide admission (the node did, and the version proves the decision
still holds), claim a run that is not QUEUED, fresh and due (the claim stays a conditional
UPDATE), or write anything but claims. If it dies or stops answering, the node stops
using it and claims in-process; a chunk it committed but could not report leaves runs
RUNNING under the node's lease that nobody renews: the reaper re-queues them when that
lease expires (docs/scheduling.md "Staged due times"). PostgreSQL stores do not use it
(they keep no version counter).

Time: the node gives the claimer its clock with each claim (:meth:`Claimer.claim`). A clock
that can be copied into the child (the system clock, an offset clock) is read there for each
chunk's time, as the node would read it; one that cannot (a test's ``FakeClock``, which holds
a lock and moves only when told to) is read once, at the call, and every chunk is written at
that time.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from cadenza.clock import Clock, SystemClock
from cadenza.store.claims import StagedStart
from cadenza.store.engine import sqlite_path
from cadenza.store.lease_clock import LeaseTime

if TYPE_CHECKING:
    from cadenza.config.loader import LoadedConfig
    from cadenza.store.protocols import DispatchStore

log = logging.getLogger("cadenza.claimer")

MIN_WORKERS = 64
"""A node with fewer workers has no claimer: its stages are too small to gain from one."""
READY_SECONDS = 30.0
"""How long the node waits for a new claimer to open its store before giving up on it."""
REPORT_SECONDS = 5.0
"""A chunk not reported within this many seconds: the claimer is given up."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk the claimer committed: the runs it was given (``size``, the first of the
    order) and those it claimed with their first step run ids."""

    size: int
    taken: dict[str, int]
    at: datetime
    version: int
    """The runs' version after the chunk."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The claimer stopped before the order's end: ``why`` (the version moved, an error)."""

    why: str


class Claimer:
    """The node's side of the claimer process (see the module docstring). Used by the
    dispatcher thread only."""

    def __init__(self, url: str, synchronous: str, lease_time: LeaseTime = "clock") -> None:
        self.url = url
        self.synchronous = synchronous
        self.lease_time = lease_time
        """The node's store's: the claimer writes lease times the same way."""
        self._conn: Connection | None = None
        self._process: Any = None
        self._ready = False
        self._broken: str | None = None
        self._token = 0
        self._submitted = 0
        self._seq = 0
        """The number of the last claim told; every report carries it (a report of an
        earlier claim that was not read to its end is skipped)."""
        self.chunks = 0
        """Chunks committed by the claimer (all stages)."""
        self.pools: Callable[[], Any] | None = None
        """The node's current pool plan (:class:`~cadenza.resources.leasing.PoolPlan`),
        sent with each stage: the claimer's claims lease resources like the node's."""

    def start(self) -> None:
        """Start the process (returns at once; it opens the store in the background)."""
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs, self.url, self.synchronous,
                                                        self.lease_time),
                                  name="cadenza-claimer", daemon=True)
        process.start()
        theirs.close()
        self._conn, self._process = mine, process

    @property
    def broken(self) -> str | None:
        """Why the claimer was given up (None while it may be used)."""
        return self._broken

    def ready(self, wait: float = 0.0) -> bool:
        """Whether the process is up with its store open (waits up to ``wait`` seconds)."""
        if self._ready or self._broken or self._conn is None:
            return self._ready
        try:
            if self._conn.poll(wait):
                message = self._conn.recv()
                if message == ("ready",):
                    self._ready = True
                else:
                    self._give_up(f"it did not start: {message[1] if message else '?'}")
        except (EOFError, OSError) as exc:
            self._give_up(f"it did not start: {exc!r}")
        return self._ready

    def submit(self, starts: Sequence[StagedStart], owner: str, lease_until: datetime) -> int:
        """Hand over a stage's encoded claims ahead of its due time; returns the token to
        :meth:`claim` them with (0: the claimer cannot be used)."""
        if not self.ready():
            return 0
        self._token += 1
        plan = self.pools() if self.pools is not None else None
        if not self._send(("stage", self._token, list(starts), owner, lease_until, plan)):
            return 0
        self._submitted = self._token
        return self._token

    def claim(self, token: int, run_ids: Sequence[str], version: int, limit: int,
              sizes: Sequence[int], clock: Clock) -> Iterator[Chunk | Stopped]:
        """Tell the claimer (now) to write the claims of ``run_ids`` (in that order, staged
        with ``token``) in chunks of ``sizes`` (the last repeats), at most ``limit`` runs,
        each chunk only if the runs' version is still ``version`` (then the version after
        it); the iterator returned yields each :class:`Chunk` as it commits, then a
        :class:`Stopped` if it stopped before the end. ``clock`` is the node's: each chunk
        is written at its time (see the module docstring on time)."""
        if token != self._submitted or not self.ready():
            return iter([Stopped("the claimer does not have this stage")])
        self._seq += 1
        now = clock.now()
        copy: Clock | None = clock  # read in the child...
        try:
            pickle.dumps(clock)
        except (pickle.PicklingError, TypeError, AttributeError):
            copy = None  # ...unless it can live in this process only: its time at the call
        if not self._send(("claim", self._seq, token, list(run_ids), version, limit,
                           list(sizes), now, copy)):
            return iter([Stopped(self._broken or "the claimer is gone")])
        return self._reports(self._seq)

    def _reports(self, seq: int) -> Iterator[Chunk | Stopped]:
        assert self._conn is not None
        while True:
            try:
                if not self._conn.poll(REPORT_SECONDS):
                    self._give_up(f"no report within {REPORT_SECONDS:.0f}s")
                    yield Stopped(self._broken or "")
                    return
                message = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._give_up(f"it is gone ({exc!r})")
                yield Stopped(self._broken or "")
                return
            kind, of = message[0], message[1]
            if of != seq:
                continue  # a report of an earlier claim
            if kind == "chunk":
                self.chunks += 1
                yield Chunk(*message[2:])
            elif kind == "done":
                return
            else:  # ("stopped", why) or ("error", why)
                if kind == "error":
                    log.warning("the claimer failed: %s; the node claims in-process", message[2])
                yield Stopped(message[2])
                return

    def close(self, timeout: float = 5.0) -> None:
        """Stop the process."""
        conn, process = self._conn, self._process
        self._conn = None
        self._ready = False
        if conn is not None:
            try:
                conn.send(("stop",))
            except (OSError, ValueError):
                pass
            conn.close()
        if process is not None:
            process.join(timeout)
            if process.is_alive():
                process.terminate()
                process.join(timeout)

    def _send(self, message: tuple[Any, ...]) -> bool:
        try:
            assert self._conn is not None
            self._conn.send(message)
            return True
        except (OSError, ValueError, AssertionError) as exc:
            self._give_up(f"it is gone ({exc!r})")
            return False

    def _give_up(self, why: str) -> None:
        if self._broken is None:
            log.warning("claimer process given up: %s; staged claims are written in-process",
                        why)
        self._broken = why
        self._ready = False


# -- the child process ------------------------------------------------------------------------

def serve(conn: Connection, url: str, synchronous: str,
          lease_time: LeaseTime = "clock") -> None:
    """The claimer's loop (in the child process): see the module docstring."""
    # Ctrl-C in a terminal reaches the whole process group: the node decides when this
    # process stops (a "stop" message, or the pipe closing when the node is gone).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _serve(conn, url, synchronous, lease_time)
    except (EOFError, OSError):  # the node closed its end (it stopped, or is gone)
        return


def _serve(conn: Connection, url: str, synchronous: str, lease_time: LeaseTime) -> None:
    try:
        from cadenza.store import Store

        store = Store.open(url, sqlite_synchronous=synchronous, migrate=False,
                           lease_time=lease_time)
    except Exception as exc:  # reported; the node claims in-process
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready",))
    staged: dict[str, StagedStart] = {}
    seq = 0
    token, owner, until = 0, "", SystemClock().now()
    try:
        while True:
            message = conn.recv()  # EOFError when the node is gone
            if message[0] == "stop":
                return
            if message[0] == "stage":
                _, token, starts, owner, until, plan = message
                staged = {s.run_id: s for s in starts}
                if plan is not None:
                    from cadenza.resources.pools import install_leaser

                    install_leaser(store, plan)
                continue
            _, seq, wanted, run_ids, version, limit, sizes, now, clock = message
            if wanted != token:
                conn.send(("stopped", seq, "the claimer does not have this stage"))
                continue
            try:
                _claim(conn, seq, store, [staged[i] for i in run_ids if i in staged], owner,
                       until, version, limit, sizes, now, clock)
            except Exception as exc:  # reported; the node goes on in-process
                conn.send(("error", seq, f"{type(exc).__name__}: {exc}"))
    finally:
        store.close()


class _Changed(Exception):
    pass


def _claim(conn: Connection, seq: int, store: Any, order: list[StagedStart], owner: str,
           until: datetime, version: int, limit: int, sizes: list[int], now: datetime,
           clock: Clock | None) -> None:
    claimed, chunks = 0, 0
    while order and claimed < limit:
        size = min(sizes[min(chunks, len(sizes) - 1)], limit - claimed)
        chunk, order = order[:size], order[size:]
        at = clock.now() if clock is not None else now
        try:
            with store.write() as c:
                if store.runs_version(c) != version:
                    raise _Changed
                taken = store.claim_staged(c, chunk, owner, until, now=at)
                version = store.runs_version(c)
        except _Changed:
            conn.send(("stopped", seq, "a run changed since the node's previous chunk"))
            return
        conn.send(("chunk", seq, len(chunk), taken, at, version))
        claimed += len(taken)
        chunks += 1
        if len(taken) != len(chunk):
            conn.send(("stopped", seq, f"{len(chunk) - len(taken)} staged runs changed "
                                       "before their claim"))
            return
    conn.send(("done", seq))


def claimer_for(store: DispatchStore, config: LoadedConfig, workers: int,
                 wanted: bool | None) -> Claimer | None:
    """The claimer process of a node (not started), when it is wanted (default: a SQLite
    file store and at least :data:`~cadenza.executor.claimer.MIN_WORKERS` workers)."""
    url = store.engine.url
    if wanted is False or store.dialect != "sqlite" or sqlite_path(url) is None:
        return None
    if wanted is None and workers < MIN_WORKERS:
        return None
    claimer = Claimer(url.render_as_string(hide_password=False),
                      config.settings.store.sqlite_synchronous, store.lease_time)
    # The claimer's claims take resource leases like the node's (the same claim hook).
    claimer.pools = lambda: pool_plan(store)
    return claimer


def pool_plan(store: DispatchStore) -> object:
    """The resource plan of ``store``'s pools (None without pools), for the claimer's claims."""
    from cadenza.resources.pools import leaser_of

    leaser = leaser_of(store)
    return None if leaser is None else leaser.plan
