"""The http step's egress policy against a real HTTP server on 127.0.0.1.

The server must live on loopback, which the policy refuses. To test what happens to a
*public* name (pinning, redirects from a public host to an internal one), the tests
inject two things, both honest about what they replace:

* a resolver that answers ``public.test`` and ``other.test`` with 127.0.0.1 (``.test``
  is reserved: the system resolver cannot answer it, so a request that succeeds provably
  connected to the address the guard pinned, not to a second DNS answer);
* an ``is_public`` policy that counts exactly 127.0.0.1 as public (standing for a public
  server's address) and judges every other address by the real rule. Redirect targets
  are therefore other addresses (169.254.169.254, ::1, 127.0.0.2, 10.0.0.1), refused
  before any connection is attempted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cadenza.netguard import Address, EgressRefused, default_is_public, system_resolver
from cadenza.steps.builtin.http import HttpConfig, HttpStep

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from http_ctx import HttpTestContext, LocalServer, settings_with

STAND_IN = IPv4Address("127.0.0.1")


def stand_in_is_public(address: Address) -> bool:
    """127.0.0.1 plays a public server's address; everything else: the real rule."""
    return address == STAND_IN or default_is_public(address)


class FakeDns:
    """``public.test`` and ``other.test`` → 127.0.0.1, extra names as given; other names
    go to the system resolver. Counts its calls per name."""

    def __init__(self, extra: dict[str, list[str]] | None = None) -> None:
        self.answers = {"public.test": ["127.0.0.1"], "other.test": ["127.0.0.1"],
                        **(extra or {})}
        self.calls: dict[str, int] = {}

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls[host] = self.calls.get(host, 0) + 1
        if host in self.answers:
            return self.answers[host]
        return system_resolver(host, port)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    srv = LocalServer()
    yield srv
    srv.close()


@pytest.fixture
def ctx(server: LocalServer, tmp_path: Path) -> Iterator[HttpTestContext]:
    connections: dict[str, dict[str, Any]] = {
        "intranet": {"type": "http", "base_url": server.url(""), "allow_private": True},
        "strict": {"type": "http", "base_url": server.url("")}}
    context = HttpTestContext(tmp_path, settings_with(connections), resolver=FakeDns(),
                              is_public=stand_in_is_public)
    yield context
    context.close()


def run(ctx: HttpTestContext, step: HttpStep | None = None, **fields: Any) -> dict[str, Any]:
    config = HttpConfig.model_validate({"name": "call", "type": "http", **fields})
    return dict((step or HttpStep()).run(ctx, config).output)


def refused(ctx: HttpTestContext, server: LocalServer, step: HttpStep | None = None,
            *, hops_before: int = 0, **fields: Any) -> str:
    """Run the step, expect EgressRefused, and check that only the ``hops_before`` hops
    before the refused one reached the server."""
    before = len(server.seen)
    with pytest.raises(EgressRefused) as caught:
        run(ctx, step, **fields)
    assert len(server.seen) == before + hops_before, "the refused request reached the server"
    assert ctx.http_events()[-1]["status"] is None
    assert ctx.http_events()[-1]["error"].startswith("refused")
    return str(caught.value)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{port}/json", "http://localhost:{port}/json", "http://[::1]:{port}/json",
    "http://169.254.169.254/latest/meta-data/", "http://2130706433:{port}/json",
    "http://0x7f.0.0.1:{port}/json", "http://0x7f.1:{port}/json",
    "http://017700000001:{port}/json", "http://127.1:{port}/json",
    "http://[::ffff:127.0.0.1]:{port}/json", "http://[::ffff:7f00:1]:{port}/json",
    "http://0.0.0.0:{port}/json", "http://public@127.0.0.1:{port}/json",
    "http://10.0.0.1/", "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/",
    "http://[fd00::1]/", "http://[fe80::1]/", "http://224.0.0.1/", "http://240.0.0.1/",
    "http://[2002:7f00:1::]/", "http://[64:ff9b::a9fe:a9fe]/",
])
@pytest.mark.reliability_case(28)
def test_a_bare_url_never_reaches_internal_addresses(ctx: HttpTestContext,
                                                     server: LocalServer, url: str) -> None:
    message = refused(ctx, server, url=url.format(port=server.port))
    assert "allow_private" in message


def test_a_connection_without_allow_private_is_strict(tmp_path: Path,
                                                      server: LocalServer) -> None:
    settings = settings_with({"strict": {"type": "http", "base_url": server.url("")}})
    ctx = HttpTestContext(tmp_path, settings)  # the real rule, 127.0.0.1 included
    try:
        assert "loopback" in refused(ctx, server, connection="strict", path="/json")
    finally:
        ctx.close()


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/_x",
                                 "ftp://example.org/x"])
@pytest.mark.reliability_case(28)
def test_only_http_and_https(ctx: HttpTestContext, server: LocalServer, url: str) -> None:
    with pytest.raises(ValidationError):  # written in jobs.toml: refused at validation
        HttpConfig.model_validate({"name": "call", "type": "http", "url": url})
    config = HttpConfig.model_validate({"name": "call", "type": "http", "url": "${params.u}"})
    with pytest.raises(EgressRefused, match="http"):  # produced by a ${...} token
        HttpStep().run(ctx, config.model_copy(update={"url": url}))


def test_names_are_judged_by_every_address_they_resolve_to(ctx: HttpTestContext,
                                                           server: LocalServer) -> None:
    dns = FakeDns({"internal.test": ["127.0.0.1"], "mixed.test": ["93.184.215.14", "10.0.0.7"],
                   "meta.test": ["169.254.169.254"]})
    step = HttpStep(resolver=dns)  # the real is_public rule
    assert "internal.test (127.0.0.1): a loopback" in refused(
        ctx, server, step, url=f"http://internal.test:{server.port}/json")
    assert "10.0.0.7" in refused(ctx, server, step, url="http://mixed.test/")
    assert "link-local" in refused(ctx, server, step, url="http://meta.test/")


@pytest.mark.reliability_case(28)
def test_public_name_is_pinned_to_the_checked_address(ctx: HttpTestContext,
                                                      server: LocalServer) -> None:
    dns = FakeDns()
    answers = iter([["127.0.0.1"], ["10.0.0.1"]])  # a rebinding DNS: second answer internal
    dns.answers["public.test"] = next(answers)
    step = HttpStep(resolver=dns, is_public=stand_in_is_public)
    out = run(ctx, step, url=f"http://public.test:{server.port}/json")
    dns.answers["public.test"] = next(answers)
    assert out["json"] == {"a": {"b": 42}, "list": [1, 2]}
    assert dns.calls["public.test"] == 1  # resolved once, then connected to that address
    assert server.seen[-1].headers["host"] == f"public.test:{server.port}"  # Host kept
    assert "10.0.0.1" in refused(ctx, server, step, url=f"http://public.test:{server.port}/")


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/",
                                    "http://[::1]:{port}/json", "http://127.0.0.2:{port}/json",
                                    "http://2130706434:{port}/json", "http://10.0.0.1/"])
@pytest.mark.reliability_case(28)
def test_a_redirect_to_an_internal_host_is_refused(ctx: HttpTestContext,
                                                   server: LocalServer, target: str) -> None:
    step = HttpStep(resolver=FakeDns(), is_public=stand_in_is_public)
    url = f"http://public.test:{server.port}/redirect"
    refused(ctx, server, step, url=url, query={"to": target.format(port=server.port)},
            hops_before=1)
    assert [e["status"] for e in ctx.http_events()] == [302, None]
    assert server.seen[-1].path == "/redirect"  # the first hop went; the second did not


def test_redirects_between_public_hosts_drop_secret_headers(ctx: HttpTestContext,
                                                            server: LocalServer) -> None:
    step = HttpStep(resolver=FakeDns(), is_public=stand_in_is_public)
    headers = {"Authorization": "Bearer s3cr3t", "X-Api-Key": "k3y", "X-Plain": "p"}
    out = run(ctx, step, url=f"http://public.test:{server.port}/redirect", headers=headers,
              query={"to": f"http://other.test:{server.port}/json"})
    assert out["status"] == 200 and out["url"] == f"http://other.test:{server.port}/json"
    first, second = server.seen[-2:]
    assert first.headers["authorization"] == "Bearer s3cr3t" and first.headers["x-api-key"]
    assert "authorization" not in second.headers and "x-api-key" not in second.headers
    assert second.headers["x-plain"] == "p"
    assert second.headers["host"] == f"other.test:{server.port}"
    assert [(e["host"], e["status"], e["hop"]) for e in ctx.http_events()] == [
        ("public.test", 302, 0), ("other.test", 200, 1)]


def test_too_many_redirects_is_fatal(ctx: HttpTestContext, server: LocalServer) -> None:
    from cadenza.domain.errors import Fatal

    step = HttpStep(resolver=FakeDns(), is_public=stand_in_is_public)
    with pytest.raises(Fatal, match="more than 10 redirects"):
        run(ctx, step, url=f"http://public.test:{server.port}/loop")
    assert len(ctx.http_events()) == 11  # the first request and 10 redirects, each checked


@pytest.mark.skipif(sys.platform == "win32", reason="numeric host forms are glibc/BSD")
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433", "0x7f.0.0.1"])
def test_allow_private_reaches_the_same_targets(tmp_path: Path, server: LocalServer,
                                                host: str) -> None:
    connections = {"intranet": {"type": "http", "base_url": server.url("", host=host),
                                "allow_private": True}}
    ctx = HttpTestContext(tmp_path, settings_with(connections))
    try:
        out = run(ctx, connection="intranet", path="/redirect",
                  query={"to": f"http://127.0.0.1:{server.port}/json"})
        assert out["json"] == {"a": {"b": 42}, "list": [1, 2]}
        assert [e["status"] for e in ctx.http_events()] == [302, 200]
    finally:
        ctx.close()
