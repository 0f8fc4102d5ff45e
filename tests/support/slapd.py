"""A real OpenLDAP server (the Debian ``slapd`` package) for the ldap_sync tests.

:func:`slapd` is a session-scoped fixture: it writes a ``slapd.conf`` in a temporary
directory (an mdb database under ``dc=example,dc=org``, the core/cosine/nis/inetOrgPerson
schemas, a reader account that may only read, a size limit of 500 entries per search so
that only a paged search sees everything), generates a CA and a server certificate with
``cryptography`` for StartTLS and ldaps, loads the people of :data:`OUS` offline with
``slapadd`` and starts ``slapd`` on two free loopback ports (ldap:// and ldaps://). It
stops the server at the end of the session. Where slapd is not installed the tests call
``service_missing`` (skipped on a person's machine, failed under CI=true).

The people are made by :func:`person` (unicode names, several mail addresses and phone
numbers, a binary ``jpegPhoto``, and a few uids holding ``, + \\ #`` so that their DNs
need escaping); a test computes the table it expects from the same data.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cadenza.clock import SystemClock
from cadenza.steps.builtin.lib.ldapsearch import escape_rdn, ldap3
from tests.conftest import service_missing

SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
SUFFIX = "dc=example,dc=org"
ADMIN_DN = f"cn=admin,{SUFFIX}"
ADMIN_PW = "admin-pw-5d1"
READER_DN = f"cn=reader,{SUFFIX}"
READER_PW = "reader-Pw-8f3!x"
SIZE_LIMIT = 500
#: organisational units loaded at start, with how many people each holds
OUS = {"sync": 5000, "shrink": 5000, "small": 30}

CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {d}/slapd.pid
argsfile {d}/slapd.args
TLSCACertificateFile {d}/ca.pem
TLSCertificateFile {d}/server.pem
TLSCertificateKeyFile {d}/server.key
sizelimit size.soft={limit} size.hard={limit} size.prtotal=unlimited
database mdb
maxsize 1073741824
suffix "{suffix}"
rootdn "{admin}"
rootpw {admin_pw}
directory {d}/db
dbnosync
index objectClass eq
index uid eq
access to attrs=userPassword by anonymous auth by * none
access to * by users read by * none
"""


@dataclass
class Slapd:
    """A running slapd: its URLs, the CA certificate that signed its own, its accounts."""

    directory: Path
    port: int
    tls_port: int
    process: subprocess.Popen[bytes] | None = None
    people: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def ldaps_url(self) -> str:
        return f"ldaps://127.0.0.1:{self.tls_port}"

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    def base(self, ou: str) -> str:
        return f"ou={ou},{SUFFIX}"

    def admin(self) -> ldap3.Connection:
        """A connection bound as the directory's admin (the tests change entries with it)."""
        server = ldap3.Server("127.0.0.1", port=self.port)
        return ldap3.Connection(server, ADMIN_DN, ADMIN_PW, auto_bind=True,
                                raise_exceptions=True)

    def launch(self) -> None:
        """Start slapd on the server's ports (again, after :meth:`stop`)."""
        log = (self.directory / "slapd.log").open("ab")
        self.process = subprocess.Popen(
            [SLAPD, "-d", "0", "-f", str(self.directory / "slapd.conf"), "-h",
             f"ldap://127.0.0.1:{self.port}/ ldaps://127.0.0.1:{self.tls_port}/ "
             f"ldap://127.0.0.2:{self.port}/"],  # an address the certificate does not name
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            _wait_listening(self)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def person(ou: str, n: int) -> dict[str, list[str]]:
    """The attributes of person ``n`` of ``ou`` (text values; ``jpegPhoto`` as base64 of
    its bytes). Every 7th has two mail addresses, every 11th two phone numbers; the first
    three have a uid that needs escaping in a DN."""
    uid = f"{ou}-{n:05d}"
    if n < 3:
        uid = ["#lead, " + uid, "a+b " + uid, "back\\slash " + uid][n]
    mails = [f"{ou}.{n}@example.org"] + ([f"{ou}.{n}@alias.example.org"] if n % 7 == 0 else [])
    phones = [f"+33 1 {n:08d}"] + ([f"+33 6 {n:08d}"] if n % 11 == 0 else [])
    photo = bytes([0xFF, 0xD8, 0xFF, 0xE0]) + n.to_bytes(4, "big") + bytes(range(200, 256))
    return {
        "uid": [uid],
        "cn": [f"Zoë Ñúñez-Łukasz 名前 {n}"],
        "sn": [f"Ñúñez {n}"],
        "mail": mails,
        "telephoneNumber": phones,
        "jpegPhoto": [base64.b64encode(photo).decode("ascii")],
    }


def dn_of(ou: str, uid: str) -> str:
    return f"uid={escape_rdn(uid)},ou={ou},{SUFFIX}"


def _ldif_entry(dn: str, attrs: dict[str, list[str]], classes: list[str]) -> str:
    lines = ["dn:: " + base64.b64encode(dn.encode()).decode()]
    lines += [f"objectClass: {c}" for c in classes]
    for name, values in attrs.items():
        for value in values:
            raw = value if name == "jpegPhoto" else base64.b64encode(value.encode()).decode()
            lines.append(f"{name}:: {raw}")
    return "\n".join(lines) + "\n\n"


def _ldif(people: dict[str, dict[str, list[str]]]) -> str:
    parts = [
        _ldif_entry(SUFFIX, {"dc": ["example"], "o": ["Example"]},
                    ["top", "dcObject", "organization"]),
        _ldif_entry(READER_DN, {"cn": ["reader"], "userPassword": [READER_PW]},
                    ["organizationalRole", "simpleSecurityObject"]),
    ]
    for ou in OUS:
        parts.append(_ldif_entry(f"ou={ou},{SUFFIX}", {"ou": [ou]}, ["organizationalUnit"]))
    for dn, attrs in people.items():
        parts.append(_ldif_entry(dn, attrs, ["inetOrgPerson"]))
    return "".join(parts)


def _certificates(directory: Path) -> None:
    """A CA and a server certificate for localhost / 127.0.0.1 signed by it (PEM files)."""
    now = SystemClock().now()  # certificate validity needs the real time
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cadenza test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(cert.public_bytes(pem))
    (directory / "server.key").write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(server: Slapd, seconds: float = 20.0) -> None:
    pause = threading.Event()
    for _ in range(int(seconds * 10)):
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(f"slapd exited with {server.process.returncode}: "
                               f"{(server.directory / 'slapd.log').read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.5):
                return
        except OSError:
            pause.wait(0.1)  # a port that the process we started is opening
    raise RuntimeError("slapd did not start listening")


def start(directory: Path) -> Slapd:
    """Write the config, certificates and data under ``directory``, start slapd."""
    if not (Path(SLAPD).exists() and Path(SLAPADD).exists()):
        service_missing("slapd", f"{SLAPD} is not installed (Debian package slapd)")
    (directory / "db").mkdir(parents=True)
    _certificates(directory)
    conf = directory / "slapd.conf"
    conf.write_text(CONF.format(d=directory, limit=SIZE_LIMIT, suffix=SUFFIX, admin=ADMIN_DN,
                                admin_pw=ADMIN_PW), encoding="utf-8")
    server = Slapd(directory, _free_port(), _free_port())
    for ou, count in OUS.items():
        for n in range(count):
            attrs = person(ou, n)
            server.people[dn_of(ou, attrs["uid"][0])] = attrs
    ldif = directory / "people.ldif"
    ldif.write_text(_ldif(server.people), encoding="utf-8")
    subprocess.run([SLAPADD, "-q", "-f", str(conf), "-l", str(ldif)], check=True,
                   capture_output=True)
    server.launch()
    return server


@pytest.fixture(scope="session")
def slapd() -> Iterator[Slapd]:
    """One slapd for the session (see the module's docstring)."""
    directory = Path(tempfile.mkdtemp(prefix="cadenza-slapd-"))
    server = start(directory)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
