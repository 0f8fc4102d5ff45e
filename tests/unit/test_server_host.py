"""Which --host values `cadenza serve` warns about: every one but loopback."""

from __future__ import annotations

import pytest

from cadenza.server import exposed_host


@pytest.mark.parametrize(("host", "exposed"), [
    ("127.0.0.1", False), ("127.0.0.2", False), ("::1", False), ("[::1]", False),
    ("localhost", False), ("0.0.0.0", True), ("::", True), ("192.168.1.20", True),
    ("10.0.0.1", True), ("scheduler.example.org", True),
])
def test_exposed_host(host: str, exposed: bool) -> None:
    assert exposed_host(host) is exposed


def test_the_listening_socket_gives_connections_without_nagle() -> None:
    """The accepted connections say TCP (asyncio then sets TCP_NODELAY on them) and carry
    TCP_NODELAY already: with Nagle's algorithm on, each answer's body waited for the
    client's delayed ACK, 40 ms per request on a kept-alive connection (W6)."""
    import socket

    from cadenza.server import listen

    server = listen("127.0.0.1", 0)
    client = socket.create_connection(server.getsockname()[:2])
    accepted, _ = server.accept()
    try:
        assert server.proto == socket.IPPROTO_TCP
        assert accepted.proto == socket.IPPROTO_TCP
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        for sock in (accepted, client, server):
            sock.close()
