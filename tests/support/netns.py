"""A network namespace joined to the host by a veth pair: a process started in it reaches
the host only through the pair, and :meth:`Netns.drop` takes the host's end down, so that
every packet between them vanishes (no reset, no refusal: a cable pulled, a partition),
until :meth:`Netns.heal`.

Needs Linux, iproute2's ``ip`` and CAP_NET_ADMIN (root in the test machine); :func:`why_not`
says what is missing.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys

_NUMBERS = itertools.count(1)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def why_not() -> str | None:
    """Why a namespace cannot be made here, or None when it can."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    name = f"czprobe{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"cannot create a network namespace (CAP_NET_ADMIN?): {detail.strip()}"
    _ip("netns", "del", name)
    return None


class Netns:
    """``ns_ip`` inside the namespace, ``host_ip`` on the host's end of the pair."""

    def __init__(self) -> None:
        n = next(_NUMBERS)
        tag = f"{os.getpid() % 10000}{n}"
        self.name = f"cz{tag}"
        self.host_link, self.ns_link = f"czh{tag}", f"czn{tag}"
        octet = (os.getpid() + n) % 200 + 20
        self.host_ip, self.ns_ip = f"10.231.{octet}.1", f"10.231.{octet}.2"
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.ns_link)
            _ip("link", "set", self.ns_link, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
            _ip("link", "set", self.host_link, "up")
            for args in (("addr", "add", f"{self.ns_ip}/30", "dev", self.ns_link),
                         ("link", "set", self.ns_link, "up"), ("link", "set", "lo", "up")):
                _ip("netns", "exec", self.name, "ip", *args)
        except BaseException:
            self.close()
            raise

    def command(self, args: list[str]) -> list[str]:
        """``args`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *args]

    def drop(self) -> None:
        """Every packet between the namespace and the host vanishes from now on."""
        _ip("link", "set", self.host_link, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_link, "up")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=20)
