"""E-mail over TLS with a login: STARTTLS (port 587 style) and implicit TLS (465 style)
against aiosmtpd with a certificate for 127.0.0.1 that the test trusts (``SSL_CERT_FILE``);
the password comes from a secret and is never shown, even when the login is refused."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.support.mailhooks import Inbox, free_port

from cadenza.config.schema_settings import EmailChannel
from cadenza.notify.channels import DeliveryFailed, Message, send_email

PASSWORD = "Tls-Pa55-word-9"


@pytest.fixture
def cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, trusted by ssl.create_default_context()."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(start + dt.timedelta(days=36500))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    return cert_file, key_file


def server_context(cert: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def authenticator(server: Any, session: Any, envelope: Any, mechanism: str,
                  auth_data: Any) -> Any:
    from aiosmtpd.smtp import AuthResult

    ok = auth_data.login == b"cadenza" and auth_data.password == PASSWORD.encode()
    return AuthResult(success=ok, handled=False)  # let aiosmtpd answer 235 / 535


@pytest.fixture
def starttls_server(cert: tuple[Path, Path]) -> Iterator[tuple[int, Inbox]]:
    from aiosmtpd.controller import Controller

    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port,
                            tls_context=server_context(cert), require_starttls=True,
                            authenticator=authenticator, auth_required=True)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


@pytest.fixture
def implicit_tls_server(cert: tuple[Path, Path]) -> Iterator[tuple[int, Inbox]]:
    from aiosmtpd.controller import Controller

    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port,
                            ssl_context=server_context(cert), authenticator=authenticator,
                            auth_required=True,
                            # aiosmtpd sees only STARTTLS as TLS; the socket is TLS here.
                            auth_require_tls=False)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


def channel(port: int, **extra: object) -> EmailChannel:
    return EmailChannel.model_validate({
        "type": "email", "host": "127.0.0.1", "port": port, "sender": "cadenza@example.org",
        "username": "cadenza", "password": PASSWORD, "timeout": "5s", **extra})


MESSAGE = Message("[cadenza] test", "hello\n", "<p>hello</p>")


def test_starttls_with_login(starttls_server: tuple[int, Inbox]) -> None:
    port, inbox = starttls_server
    send_email(channel(port), "ops@example.org", MESSAGE)
    ((rcpt, mail),) = inbox.mails
    assert rcpt == ["ops@example.org"] and mail["Subject"] == "[cadenza] test"


# The server's own warning about AUTH without STARTTLS: its socket is TLS from the start.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")
def test_implicit_tls_with_login(implicit_tls_server: tuple[int, Inbox]) -> None:
    port, inbox = implicit_tls_server
    send_email(channel(port, starttls=False, ssl=True), "ops@example.org", MESSAGE)
    assert [rcpt for rcpt, _ in inbox.mails] == [["ops@example.org"]]


def test_a_refused_login_is_permanent_and_never_shows_the_password(
        starttls_server: tuple[int, Inbox]) -> None:
    port, inbox = starttls_server
    bad = channel(port, password="Wrong-Pa55-word-1")
    with pytest.raises(DeliveryFailed) as caught:
        send_email(bad, "ops@example.org", MESSAGE)
    assert caught.value.permanent
    assert "refused the login of 'cadenza'" in str(caught.value)
    assert "Wrong-Pa55-word-1" not in str(caught.value) and inbox.mails == []


def test_a_server_without_starttls_is_refused_not_sent_in_clear(tmp_path: Path) -> None:
    from tests.support.mailhooks import smtp_server

    with smtp_server() as plain:
        with pytest.raises(DeliveryFailed, match="STARTTLS") as caught:
            send_email(channel(plain.port), "ops@example.org", MESSAGE)
        assert caught.value.permanent
        assert plain.inbox.mails == []
