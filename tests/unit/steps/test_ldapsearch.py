"""The LDAP side of ldap_sync without a directory: RFC 4515 escaping of filter values,
values as text, and the error classes (SPEC §7). A server that is not there is a real
closed port; the server's own answers are exercised against slapd in
tests/integration/test_steps_ldap_sync.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cadenza.config.schema_settings import LdapConnection
from cadenza.domain.errors import Fatal, Retryable
from cadenza.domain.params import Scope
from cadenza.steps.builtin.lib.ldapsearch import Directory, render_filter, text_of
from cadenza.steps.builtin.lib.ldapsearch import lx as ldap_errors


def test_filter_values_are_escaped_as_rfc_4515_asks() -> None:
    template = "(&(objectClass=person)(uid=${params.who}))"
    rendered = render_filter(template, Scope(params={"who": "*)(uid=*"}))
    assert rendered == "(&(objectClass=person)(uid=\\2a\\29\\28uid=\\2a))"
    assert render_filter("(cn=${params.x})", Scope(params={"x": "a\\b\x00é"})) == (
        "(cn=a\\5cb\\00é)")
    assert render_filter("(cn=$${literal})", Scope()) == "(cn=${literal})"


def test_an_unknown_parameter_in_the_filter_is_fatal() -> None:
    with pytest.raises(Fatal, match=r"filter: \$\{params.who\}: no parameter 'who'"):
        render_filter("(uid=${params.who})", Scope())


def test_values_are_text_or_base64() -> None:
    assert text_of("Zoë".encode(), binary=False) == "Zoë"
    assert text_of(b"\xff\xd8", binary=True) == "/9g="
    assert text_of(b"abc", binary=True) == "YWJj"  # a binary syntax stays base64
    assert text_of(b"\xff\xfe", binary=False) == "//4="  # not UTF-8: base64 all the same


def directory(url: str = "ldap://127.0.0.1:389", **extra: object) -> Directory:
    definition = LdapConnection.model_validate({"type": "ldap", "url": url,
                                                "bind_dn": "cn=reader,dc=x",
                                                "password": "s3cret-pw", **extra})
    return Directory("dir", definition, 5)


@pytest.mark.parametrize(("error", "cls", "fragment"), [
    (ldap_errors.LDAPInvalidCredentialsResult(49, "invalidCredentials"), Fatal,
     "invalidCredentials (49); check the connection's bind_dn and password"),
    (ldap_errors.LDAPNoSuchObjectResult(32, "noSuchObject"), Fatal, "check 'base'"),
    (ldap_errors.LDAPSizeLimitExceededResult(4, "sizeLimitExceeded"), Fatal, "page_size"),
    (ldap_errors.LDAPBusyResult(51, "busy"), Retryable, "busy (51)"),
    (ldap_errors.LDAPUnavailableResult(52, "unavailable"), Retryable, "unavailable (52)"),
    (ldap_errors.LDAPSocketReceiveError("connection reset"), Retryable, "connection reset"),
    (ldap_errors.LDAPStartTLSError("wrap socket error: certificate verify failed"), Fatal,
     "TLS failed"),
])
def test_errors_are_classified(error: Exception, cls: type[Exception], fragment: str) -> None:
    translated = directory()._translate(error, "bind")
    assert type(translated) is cls
    assert fragment in str(translated)
    assert "LDAP connection 'dir' (ldap://127.0.0.1:389, bind as cn=reader,dc=x): bind" in str(
        translated)
    assert "s3cret-pw" not in str(translated)


def test_a_server_that_is_not_there_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Retryable, match=f"127.0.0.1:{port}"):
        directory(f"ldap://127.0.0.1:{port}").open()


def test_a_ca_file_that_cannot_be_read_is_fatal(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(Fatal, match=f"ca_file {missing} cannot be used: .*No such file"):
        directory(start_tls=True, ca_file=str(missing)).open()
    (tmp_path / "bad.pem").write_text("not a certificate", encoding="utf-8")
    with pytest.raises(Fatal, match="cannot be used"):
        directory(start_tls=True, ca_file=str(tmp_path / "bad.pem")).open()
