"""A demo home served for real: ``open_server`` (node and uvicorn) on a free port of this
machine, on the system clock, for the tests that need a socket (TLS, proxy headers, a
client closing an SSE stream)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx

from cadenza.clock import SystemClock
from cadenza.security import hash_password
from cadenza.server import ServeOptions, Server, open_server
from cadenza.services import Actor, Services
from cadenza.services.config import init_home

PASSWORD = "correct horse battery"
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def make_home(root: Path, server_lines: str = "", jobs: str = "") -> Path:
    """A demo home whose ``[server]`` table gets ``server_lines`` and jobs.toml ``jobs``;
    users ``viewer`` and ``admin2`` (password :data:`PASSWORD`)."""
    created = init_home(root / "home", example=True, actor=Actor("cli", "init"),
                        clock=SystemClock())
    settings = created.path / "cadenza.toml"
    text = settings.read_text(encoding="utf-8")
    settings.write_text(text.replace("[server]\n", "[server]\n" + server_lines, 1),
                        encoding="utf-8")
    if jobs:
        with (created.path / "jobs.toml").open("a", encoding="utf-8") as fh:
            fh.write(jobs)
    return created.path


@contextmanager
def served(home: Path, *, host: str = "127.0.0.1", workers: int = 1) -> Iterator[Server]:
    """The home served on ``host`` and a free port until the block ends."""
    services = Services.at(home, actor=Actor("cli", "test"), clock=SystemClock())
    store = services.store()
    for name, role in (("viewer", "viewer"), ("admin2", "admin")):
        if store.get_user(name) is None:
            store.add_user(name, hash_password(PASSWORD), [role])
    server = open_server(services, ServeOptions(host=host, port=free_port(), workers=workers,
                                                scheduler=False))
    server.start()
    try:
        eventually(lambda: server.web is not None and server.web.started, "uvicorn started")
        yield server
    finally:
        server.stop()


def eventually(probe: Callable[[], T | None], what: str, seconds: float = 20.0) -> T:
    """Wait (a real bound: real sockets) until ``probe`` answers something truthy."""
    pause = threading.Event()
    for _ in range(int(seconds / 0.05)):
        value = probe()
        if value:
            return value
        pause.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost and its key (PEM), made here."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file


def client(base: str, cert: Path | None = None) -> httpx.Client:
    """An httpx client of ``base`` (trusting ``cert`` for https)."""
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(cert)) \
        if cert is not None else True
    return httpx.Client(base_url=base, verify=verify, timeout=20)
