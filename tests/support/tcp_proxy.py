"""A TCP proxy whose faults a test switches at run time: a node's road to its database.

:class:`TcpProxy` listens on a free port of 127.0.0.1 and forwards every connection to one
target (a PostgreSQL server), a thread per direction. Its faults:

* :meth:`TcpProxy.cut` — reset every open connection and refuse new ones (a cable pulled, a
  firewall that answers);
* :meth:`TcpProxy.blackhole` — keep the connections open but forward nothing and accept
  nothing new (a partition that drops packets: the peers hear nothing, not even an error,
  until their own timeouts);
* :attr:`TcpProxy.delay` — seconds added before each chunk is forwarded (a slow link);
* :meth:`TcpProxy.heal` — forward again (connections cut or held stay as they are).
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TcpProxy:
    """See the module docstring."""

    def __init__(self, target_host: str, target_port: int, listen: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.delay = 0.0
        self._mode = "open"  # open, blackhole, cut
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._closed = threading.Event()
        self.listen = listen
        self._listener = socket.create_server((listen, self.port), backlog=64)
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    # -- faults -------------------------------------------------------------------------

    def cut(self) -> None:
        """Reset every open connection; refuse new ones until :meth:`heal`."""
        with self._lock:
            self._mode = "cut"
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            for sock in pair:
                _reset(sock)

    def blackhole(self) -> None:
        """Forward nothing, answer nothing: open connections hang, new ones are not
        accepted (they wait in the backlog) until :meth:`heal`."""
        with self._lock:
            self._mode = "blackhole"

    def heal(self) -> None:
        """Forward again."""
        with self._lock:
            self._mode = "open"

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._listener.close()
        self._thread.join(5)

    def upstream_ports(self) -> set[int]:
        """The local ports of the open connections to the target (how the target sees
        this proxy's clients)."""
        with self._lock:
            pairs = list(self._pairs)
        ports = set()
        for _, upstream in pairs:
            with contextlib.suppress(OSError):
                ports.add(int(upstream.getsockname()[1]))
        return ports

    # -- forwarding ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            if self._mode == "blackhole":
                time.sleep(0.05)
                continue
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self._mode == "cut":
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True,
                                 name="tcp-proxy-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket,
              pair: tuple[socket.socket, socket.socket]) -> None:
        try:
            while not self._closed.is_set():
                if self._mode == "blackhole":
                    time.sleep(0.05)  # hold the bytes: the peer hears nothing
                    continue
                ready, _, _ = select.select([src], [], [], 0.2)
                if not ready:
                    continue
                if self._mode != "open":
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except (OSError, ValueError):  # closed under us (cut, close)
            pass
        finally:
            with self._lock:
                self._pairs.discard(pair)
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a dropped connection looks to its peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
