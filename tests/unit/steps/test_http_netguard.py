"""The egress rules and the bounded reading of answers, without a network (injected DNS)."""

from __future__ import annotations

import gzip
import ipaddress
import zlib
from collections.abc import Sequence

import httpx
import pytest

from cadenza.netguard import (
    BoundedDecoder,
    EgressPolicy,
    EgressRefused,
    legacy_ipv4,
    literal_address,
    pinned,
    redacted_url,
    refusal_reason,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("2130706433", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("017700000001", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"), ("0x7f.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"),
    ("0177.0.0.01", "127.0.0.1"), ("127.0.0.1.", "127.0.0.1"), ("10.1", "10.0.0.1"),
    ("192.168.257", "192.168.1.1"), ("0", "0.0.0.0"), ("0x", "0.0.0.0"),
])
def test_inet_aton_forms_are_normalised(text: str, expected: str) -> None:
    assert legacy_ipv4(text) == ipaddress.IPv4Address(expected)


@pytest.mark.parametrize("text", ["example.org", "256.1.1.1", "1.2.3.4.5", "08.1.1.1",
                                  "0x1g", "1..2", "", "4294967296", "1.2.3.256", "a.1"])
def test_names_and_out_of_range_forms_are_not_addresses(text: str) -> None:
    assert legacy_ipv4(text) is None


def test_literal_address_reads_brackets_and_zones() -> None:
    assert literal_address("[::1]") == ipaddress.IPv6Address("::1")
    assert literal_address("fe80::1%25eth0") is not None
    assert literal_address("example.org") is None


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("0.0.0.0", "unspecified"),
    ("::", "unspecified"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("10.1.2.3", "private"), ("172.31.0.1", "private"), ("192.168.0.1", "private"),
    ("fd12:3456::1", "unique-local"), ("fec0::1", "site-local"), ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"), ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("100.64.0.1", "shared"), ("192.0.2.1", "private"), ("0.1.2.3", "private"),
    ("::ffff:127.0.0.1", "loopback address (embedded in ::ffff:7f00:1)"),
    ("::ffff:169.254.169.254", "link-local address (embedded"),
    ("2002:a00:1::", "private address (embedded"),
    ("64:ff9b::7f00:1", "loopback address (embedded"), ("::127.0.0.1", "reserved"),
    ("2001::1", "private"),  # Teredo
])
def test_internal_addresses_are_refused(address: str, reason: str) -> None:
    assert reason in (refusal_reason(ipaddress.ip_address(address)) or "")


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111",
                                     "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


def dns(answers: dict[str, list[str]]) -> object:
    def resolve(host: str, port: int) -> Sequence[str]:
        if host not in answers:
            raise OSError(f"no such name {host}")
        return answers[host]

    return resolve


def check(url: str, **answers: list[str]) -> list[str]:
    policy = EgressPolicy(resolver=dns({k.replace("_", "."): v
                                        for k, v in answers.items()}))  # type: ignore[arg-type]
    return [str(a) for a in policy.check(httpx.URL(url))]


def test_policy_checks_names_and_literals() -> None:
    assert check("https://good.test/x", good_test=["93.184.215.14", "2606:4700::1"]) == [
        "93.184.215.14", "2606:4700::1"]
    with pytest.raises(EgressRefused, match=r"bad.test \(10.0.0.1\): a private"):
        check("http://bad.test/", bad_test=["93.184.215.14", "10.0.0.1"])
    with pytest.raises(EgressRefused, match="loopback"):
        check("http://user:pw@0x7f.1/")
    with pytest.raises(EgressRefused, match="not an address"):
        check("http://odd.test/", odd_test=["not-an-ip"])
    with pytest.raises(httpx.ConnectError, match="cannot resolve"):
        check("http://missing.test/")
    with pytest.raises(httpx.ConnectError, match="no address"):
        check("http://empty.test/", empty_test=[])
    for url in ("file:///etc/passwd", "gopher://x.test/", "ftp://x.test/"):
        with pytest.raises(EgressRefused, match="only http and https"):
            check(url)


def test_allow_private_skips_the_address_rule_but_not_the_scheme_rule() -> None:
    policy = EgressPolicy(allow_private=True)
    assert policy.check(httpx.URL("http://127.0.0.1/")) == []
    with pytest.raises(EgressRefused):
        policy.check(httpx.URL("file:///etc/passwd"))


def test_pinned_request_keeps_host_header_and_tls_name() -> None:
    request = httpx.Request("POST", "https://api.example.org:8443/v1?x=1",
                            headers={"X-A": "1"}, content=b"body")
    sent = pinned(request, ipaddress.ip_address("93.184.215.14"))
    assert str(sent.url) == "https://93.184.215.14:8443/v1?x=1"
    assert sent.headers["host"] == "api.example.org:8443" and sent.headers["x-a"] == "1"
    assert sent.extensions["sni_hostname"] == "api.example.org"
    assert sent.read() == b"body"
    six = pinned(httpx.Request("GET", "http://v6.example.org/"), ipaddress.ip_address("2606::1"))
    assert str(six.url) == "http://[2606::1]/" and "sni_hostname" not in six.extensions


def test_decoder_never_inflates_past_its_limit() -> None:
    bomb = gzip.compress(bytes(50 * 1024 * 1024))
    decoder = BoundedDecoder("gzip")
    out = decoder.decode(bomb, 1024 * 1024 + 1)
    assert len(out) == 1024 * 1024 + 1


def test_decoder_reads_deflate_both_ways_and_gzip_members() -> None:
    data = b'{"a": 1}' * 100
    wrapped, raw = zlib.compress(data), zlib.compress(data)[2:-4]
    for body in (wrapped, raw):
        decoder = BoundedDecoder("deflate")
        out = decoder.decode(body[:1], 10**6) + decoder.decode(body[1:], 10**6)
        assert out == data
    members = gzip.compress(b"one,") + gzip.compress(b"two")
    assert BoundedDecoder("gzip").decode(members, 100) == b"one,two"
    unknown = BoundedDecoder("br")
    assert unknown.raw and unknown.decode(b"\x1b\x00", 100) == b"\x1b\x00"
    assert not BoundedDecoder("identity").raw


def test_redacted_url() -> None:
    url = httpx.URL("https://user:pw@example.org/p?api_key=k1&token=t&page=2")
    assert redacted_url(url) == "https://example.org/p?api_key=***&token=***&page=2"
    assert redacted_url(httpx.URL("http://example.org/a?b=1")) == "http://example.org/a?b=1"
