"""An LDAP directory read for ``ldap_sync``: connect (ldaps or StartTLS), bind, paged search.

Built on ldap3 (pure Python: no C headers to build, the same on Windows; docs/ldap_sync.md
says why not python-ldap). Two things of ldap3 2.9 are replaced here:

* TLS: ldap3 turns the SSL context's own host name check off and calls the deprecated
  ``ssl.match_hostname`` itself. :class:`_Tls` wraps the socket with a standard
  ``ssl.create_default_context`` (system CAs, or the connection's ``ca_file``) that checks
  the certificate chain and the host name during the handshake;
* its import uses names pyasn1 0.6 deprecates: the warnings are silenced around the import
  only.

Errors are translated here, once (docs/retries.md): refused credentials, a missing base, a bad
filter, refused TLS and a server that ignores paging are :class:`Fatal` (no later attempt
gets past them); a server that cannot be reached, drops the connection, is busy or forgets
the paging cookie mid-search is :class:`Retryable` (the next attempt searches again from
the start). The bind password never enters a message.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cadenza.domain.errors import Fatal, Retryable, StepError
from cadenza.domain.params import ParamError, Scope, find_tokens, lookup

with warnings.catch_warnings():  # ldap3 2.9 imports names that pyasn1 0.6 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import ldap3  # type: ignore[import-untyped]
    from ldap3.core import exceptions as lx  # type: ignore[import-untyped]
    from ldap3.utils.conv import escape_filter_chars  # type: ignore[import-untyped]
    from ldap3.utils.dn import escape_rdn  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from cadenza.config.schema_settings import LdapConnection

PAGED_RESULTS = "1.2.840.113556.1.4.319"
"""The simple paged results control (RFC 2696)."""
SCOPES = {"base": ldap3.BASE, "one": ldap3.LEVEL, "subtree": ldap3.SUBTREE}
#: attribute syntaxes whose values are bytes, not text (RFC 4517 and common schemas)
BINARY_SYNTAXES = frozenset({
    "1.3.6.1.4.1.1466.115.121.1.4",   # audio
    "1.3.6.1.4.1.1466.115.121.1.5",   # binary
    "1.3.6.1.4.1.1466.115.121.1.8",   # certificate
    "1.3.6.1.4.1.1466.115.121.1.9",   # certificate list
    "1.3.6.1.4.1.1466.115.121.1.10",  # certificate pair
    "1.3.6.1.4.1.1466.115.121.1.23",  # fax
    "1.3.6.1.4.1.1466.115.121.1.28",  # JPEG
    "1.3.6.1.4.1.1466.115.121.1.40",  # octet string
    "1.3.6.1.4.1.1466.115.121.1.49",  # supported algorithm
    "1.2.840.113556.1.4.907",         # Active Directory security descriptor
})
#: result codes a later attempt may get past: timeLimitExceeded, busy, unavailable,
#: unwillingToPerform (often overload), other, serverDown
_RETRY_CODES = {3, 51, 52, 53, 80, 81}
#: a continued page refused with these (operationsError, protocolError: OpenLDAP's "paged
#: results cookie is invalid", Active Directory's lost paging state): the search may start over
_LOST_PAGING = {1, 2}
_HINTS = {
    49: "check the connection's bind_dn and password (the password is not shown)",
    48: "the server refuses this kind of bind (an anonymous bind, or a bind without TLS?)",
    50: "the bind account may not read there",
    32: "check 'base': the entry does not exist",
    34: "check 'base' or 'bind_dn': not a valid DN",
    4: "the server ignored the paged search; raise its size limit for paged searches "
       "(OpenLDAP: size.prtotal) or lower page_size",
    11: "the server's administrative limit stopped the search; lower page_size",
    13: "the server requires TLS: set start_tls = true or use an ldaps:// URL",
    8: "the server requires TLS: set start_tls = true or use an ldaps:// URL",
}


def render_filter(template: str, scope: Scope) -> str:
    """``template`` with each ``${...}`` token replaced by its value escaped as RFC 4515
    asks (``* ( ) \\ NUL`` become ``\\2a \\28 \\29 \\5c \\00``), so that a value can never
    change the filter's structure: ``*)(uid=*`` matches those nine characters literally."""
    out, last = [], 0
    try:
        for token in find_tokens(template):
            out.append(template[last:token.start])
            value = lookup(token, scope)
            out.append(escape_filter_chars("" if value is None else str(value)))
            last = token.end
    except ParamError as exc:
        raise Fatal(f"filter: {exc}") from None
    out.append(template[last:])
    return "".join(out).replace("$${", "${")


@dataclass(frozen=True)
class Entry:
    """One entry found: its DN and its values by attribute name (as the server spells it),
    each as the server sent it (bytes)."""

    dn: str
    values: Mapping[str, list[bytes]]


class _Tls(ldap3.Tls):  # type: ignore[misc]  # ldap3 has no type hints
    """TLS with a standard SSL context: chain and host name checked in the handshake."""

    def __init__(self, context: ssl.SSLContext, host: str) -> None:
        super().__init__()
        self.context, self.host = context, host

    def wrap_socket(self, connection: Any, do_handshake: bool = False) -> None:
        connection.socket = self.context.wrap_socket(
            connection.socket, server_side=False, do_handshake_on_connect=do_handshake,
            server_hostname=self.host)


__all__ = ["Directory", "Entry", "escape_rdn", "ldap3", "render_filter", "text_of"]


def _context(definition: LdapConnection) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=definition.ca_file)
    if not definition.verify_tls:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Directory:
    """One connection to an LDAP server, opened and bound by :meth:`open`; ``name`` is the
    connection's name in cadenza.toml (for messages)."""

    def __init__(self, name: str, definition: LdapConnection, timeout: float) -> None:
        self.name, self.definition = name, definition
        parts = urlsplit(definition.url)
        self.host = parts.hostname or "127.0.0.1"
        self.ldaps = parts.scheme.lower() == "ldaps"
        self.port = parts.port or (636 if self.ldaps else 389)
        self.timeout = max(1, int(timeout))
        self.conn: Any = None
        self.schema: Any = None

    def where(self) -> str:
        who = self.definition.bind_dn or "anonymous"
        return f"LDAP connection {self.name!r} ({self.definition.url}, bind as {who})"

    def open(self) -> None:
        """Connect, start TLS if asked, bind; read the schema (for binary attributes)."""
        d = self.definition
        tls = None
        if self.ldaps or d.start_tls:
            try:
                context = _context(d)
            except (OSError, ssl.SSLError) as exc:
                raise Fatal(f"{self.where()}: ca_file {d.ca_file} cannot be used: "
                            f"{_detail(exc)}") from None
            tls = _Tls(context, self.host)
        server = ldap3.Server(self.host, port=self.port, use_ssl=self.ldaps, tls=tls,
                              get_info=ldap3.SCHEMA, connect_timeout=self.timeout)
        self.conn = ldap3.Connection(
            server, user=d.bind_dn, password=d.password,
            authentication=ldap3.SIMPLE if d.bind_dn else ldap3.ANONYMOUS,
            raise_exceptions=True, read_only=True, receive_timeout=self.timeout,
            auto_referrals=False, check_names=False)  # raw values only: no formatting cost
        try:
            self.conn.open()
            if d.start_tls and not self.ldaps:
                self.conn.start_tls()
            self.conn.bind()
        except Exception as exc:
            self.close()
            raise self._translate(exc, "bind") from None
        self.schema = server.schema

    def close(self) -> None:
        """Unbind and close the socket (quietly: the connection may be gone already)."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):  # a broken connection: nothing left to say
            conn.unbind()
        socket = getattr(conn, "socket", None)
        if socket is not None:  # ldap3 leaves the socket of a failed connect open
            with contextlib.suppress(OSError):
                socket.close()

    def __enter__(self) -> Directory:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def search(self, base: str, scope: str, filter_: str, attributes: list[str],
               page_size: int) -> Iterator[list[Entry]]:
        """The entries under ``base``, page by page (simple paged results control);
        ``attributes`` empty: every user attribute."""
        cookie: bytes | None = None
        pages = 0
        while True:
            try:
                self.conn.search(base, filter_, SCOPES[scope], attributes=attributes or
                                 [ldap3.ALL_ATTRIBUTES], paged_size=page_size,
                                 paged_cookie=cookie)
            except Exception as exc:
                error = self._translate(exc, f"search of base {base} with filter {filter_}")
                if pages and int(getattr(exc, "result", 0) or 0) in _LOST_PAGING:
                    # a continued page refused: the server lost the paging state (a
                    # restart, an expired cookie); a new search from the start may succeed
                    raise Retryable(f"{error} (page {pages + 1}: the paged search was "
                                    "interrupted; the next attempt searches again)") from None
                raise error from None
            pages += 1
            yield [Entry(str(item["dn"]), dict(item.get("raw_attributes") or {}))
                   for item in self.conn.response or () if item.get("type") == "searchResEntry"]
            controls = (self.conn.result or {}).get("controls") or {}
            cookie = ((controls.get(PAGED_RESULTS) or {}).get("value") or {}).get("cookie")
            if not cookie:
                return

    def unknown(self, attributes: list[str]) -> list[str]:
        """Those of ``attributes`` the server's schema does not define (none when the
        server publishes no schema)."""
        types = getattr(self.schema, "attribute_types", None)
        if not types:
            return []
        return [a for a in attributes if a.split(";", 1)[0] not in types and a != "1.1"]

    def binary(self, attribute: str) -> bool:
        """Whether the schema gives ``attribute`` a binary syntax (following SUP)."""
        types = getattr(self.schema, "attribute_types", None)
        name = attribute.split(";", 1)[0]
        for _ in range(10):  # a SUP chain is short; the bound guards a cyclic schema
            if types is None or name not in types:
                return attribute.lower().endswith(";binary")
            info = types[name]
            if info.syntax:
                return str(info.syntax).split("{", 1)[0] in BINARY_SYNTAXES
            if not info.superior:
                return False
            name = info.superior[0]
        return False

    def _translate(self, exc: BaseException, what: str) -> StepError:
        """The error class of an ldap3 error (see the module's docstring)."""
        head = f"{self.where()}: {what}"
        if isinstance(exc, lx.LDAPOperationResult):
            code = int(getattr(exc, "result", 0) or 0)
            text = f"{head}: {exc.description or 'error'} ({code})"
            if getattr(exc, "message", ""):
                text += f": {exc.message}"
            hint = _HINTS.get(code)
            if hint:
                text += f"; {hint}"
            return Retryable(text) if code in _RETRY_CODES else Fatal(text)
        if isinstance(exc, lx.LDAPStartTLSError | ssl.SSLError | lx.LDAPCertificateError |
                      lx.LDAPSSLConfigurationError):
            return Fatal(f"{head}: TLS failed: {_detail(exc)} (check the server's certificate, "
                         "the connection's ca_file and the host name of its url)")
        if isinstance(exc, lx.LDAPInvalidFilterError):
            return Fatal(f"{head}: invalid filter: {_detail(exc)}")
        if isinstance(exc, lx.LDAPCommunicationError | lx.LDAPResponseTimeoutError | OSError):
            return Retryable(f"{head}: {_detail(exc)}")
        if isinstance(exc, lx.LDAPException):
            return Fatal(f"{head}: {_detail(exc)}")
        return Fatal(f"{head}: {type(exc).__name__}: {_detail(exc)}")


def _detail(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]  # cut by the store, after redaction


def text_of(value: bytes, binary: bool) -> str:
    """One value as text: UTF-8 for text syntaxes; base64 for binary ones (and for a value
    of a text attribute that is not valid UTF-8)."""
    if not binary:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return base64.b64encode(value).decode("ascii")
