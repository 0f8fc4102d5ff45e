"""Checks of ``[server]`` beyond its schema: the TLS files, and who ``/metrics`` opens to.

* ``tls_cert`` and ``tls_key`` are paths relative to the home (or absolute). Each must be a
  readable file, and together they must load as a certificate chain and its private key
  (what uvicorn will do at start): a located error otherwise, so that ``cadenza validate``
  says it before ``cadenza serve`` fails. The key's content never appears in a message;
  a key file that group or others can read is a warning (POSIX).
* ``metrics_allow`` naming a loopback address while ``trusted_proxies`` is empty is a
  warning: behind a reverse proxy on the same machine every client comes from 127.0.0.1,
  so ``/metrics`` would answer anyone who reaches the proxy.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cadenza.config.problems import Reporter
from cadenza.config.validation import raw_table


def tls_path(home: Path, value: str) -> Path:
    """A ``tls_cert``/``tls_key`` value as an absolute path (relative ones: to the home)."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (home / path)


def check_server_files(data: Mapping[str, Any], home: Path, report: Reporter) -> None:
    """Report a missing, unreadable or mismatched TLS certificate or key of ``data``
    (cadenza.toml with its ``${...}`` resolved), and a loopback ``metrics_allow`` without
    ``trusted_proxies``."""
    server = raw_table(data.get("server"))
    _check_metrics_allow(server, report)
    found: dict[str, Path] = {}
    for key in ("tls_cert", "tls_key"):
        value = server.get(key)
        if not isinstance(value, str) or not value.strip():
            continue
        path = tls_path(home, value)
        what = "certificate" if key == "tls_cert" else "private key"
        if not path.is_file():
            report.error(("server", key), f"no TLS {what} file at {path} (a path relative to "
                         "the home, or absolute)")
            continue
        try:
            with path.open("rb") as handle:
                handle.read(1)
        except OSError as exc:
            report.error(("server", key), f"cannot read the TLS {what} {path}: "
                         f"{exc.strerror or exc}")
            continue
        found[key] = path
        if key == "tls_key" and os.name == "posix" and path.stat().st_mode & 0o077:
            report.warning(("server", key), f"the TLS private key {path} is readable by "
                           f"others than its owner: chmod 600 {path}")
    if len(found) == 2:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(found["tls_cert"], found["tls_key"])
        except (ssl.SSLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or type(exc).__name__
            report.error(("server", "tls_key"), f"the TLS certificate {found['tls_cert']} and "
                         f"key {found['tls_key']} do not load as a pair ({reason}): expected "
                         "PEM files, the key unencrypted and matching the certificate")


def _check_metrics_allow(server: Mapping[str, Any], report: Reporter) -> None:
    allowed = server.get("metrics_allow")
    if not isinstance(allowed, list) or server.get("trusted_proxies"):
        return
    for k, value in enumerate(allowed):
        try:
            network = ipaddress.ip_network(str(value).strip(), strict=False)
        except ValueError:
            continue  # the schema reports it
        if network.overlaps(_LOOPBACK[network.version]):
            report.warning(("server", "metrics_allow", k), f"{value!r} lets loopback clients "
                           "read /metrics without a token: behind a reverse proxy on this "
                           "machine that is every client; list the proxy in trusted_proxies "
                           "(or scrape with a token)")
            return


_LOOPBACK = {4: ipaddress.ip_network("127.0.0.0/8"), 6: ipaddress.ip_network("::1/128")}
