"""Checks of ``cadenza.toml`` beyond its schema: pools, channels, rules, tokens, exposure.

They read the raw values (guarding every type), so they still run when the schema found
errors elsewhere in the file, and every problem of the file is reported at once.

* a pool needs members; route members need a ``proxy`` and take no ``route``/``fields``;
  unit and credential members take no ``proxy``/``region``; ``health`` is for route pools;
  member ids are unique across pools; a member's ``route`` names a route member;
* at most one channel has ``default = true``; a rule's ``channel`` exists (a rule without
  one needs some channel to exist); rule names are unique;
* ``host = "0.0.0.0"`` or ``"::"`` (every interface) is a warning;
* values that look like plaintext secrets are warnings (in either file).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cadenza.config.problems import KeyPath, Reporter
from cadenza.config.tokens import check_tokens
from cadenza.config.validation import raw_table

_SECRET_KEY = re.compile(r"(?i)(password|passwd|secret|token|api[_-]?key|authorization|cookie)")
_URL_PASSWORD = re.compile(r"://[^/\s:@]+:([^@\s/]+)@")
_EVERY_INTERFACE = ("0.0.0.0", "::", "[::]", "*")


def check_settings(data: Mapping[str, Any], report: Reporter) -> None:
    """Report the problems of ``cadenza.toml`` that its schema cannot see."""
    check_tokens(dict(data), (), report, "settings")
    host = raw_table(data.get("server")).get("host")
    if isinstance(host, str) and host.strip() in _EVERY_INTERFACE:
        report.warning(("server", "host"), f"host {host!r} listens on every network interface: "
                       "anyone who can reach this machine reaches the login page; prefer "
                       "127.0.0.1 behind a reverse proxy")
    _check_pools(raw_table(data.get("pools")), report)
    channels = raw_table(data.get("channels"))
    defaults = [name for name, ch in channels.items() if raw_table(ch).get("default") is True]
    for name in defaults[1:]:
        report.error(("channels", name, "default"), f"only one channel can be the default; "
                     f"{defaults[0]!r} already is")
    _check_rules(data.get("rules"), list(channels), report)
    plaintext_secrets(data, (), report, "cadenza.toml")


def _check_pools(pools: Mapping[str, Any], report: Reporter) -> None:
    owners: dict[str, str] = {}
    routes: set[str] = set()
    bindings: list[tuple[KeyPath, str]] = []
    for name, raw in pools.items():
        pool = raw_table(raw)
        kind = pool.get("kind")
        at: KeyPath = ("pools", name)
        members = pool.get("members")
        if not isinstance(members, list) or not members:
            report.error(at, f"pool {name!r} has no members: expected at least one "
                         f"[[pools.{name}.members]] with an id", at="key")
            members = []
        if "health" in pool and kind in ("unit", "credential"):
            report.error((*at, "health"), f"health checks apply to route pools; this pool's "
                         f"kind is {kind!r}", at="key")
        for k, raw_member in enumerate(members):
            member = raw_table(raw_member)
            where: KeyPath = (*at, "members", k)
            member_id = member.get("id")
            if isinstance(member_id, str):
                if member_id in owners:
                    report.error((*where, "id"), f"member id {member_id!r} is already used in "
                                 f"pool {owners[member_id]!r}; ids are unique across pools")
                owners.setdefault(member_id, name)
                if kind == "route":
                    routes.add(member_id)
            if kind == "route":
                if "proxy" not in member:
                    report.error((*where, "proxy"), "missing required key 'proxy': a route "
                                 "member needs a proxy URL", at="parent")
                for key in ("route", "fields"):
                    if key in member:
                        report.error((*where, key), f"{key!r} is not used by route members",
                                     at="key")
            elif kind in ("unit", "credential"):
                for key in ("proxy", "region"):
                    if key in member:
                        report.error((*where, key), f"{key!r} is only for route members; bind "
                                     "a route with route = \"MEMBER\"", at="key")
                if isinstance(member.get("route"), str):
                    bindings.append(((*where, "route"), member["route"]))
    for path, route in bindings:
        if route not in routes:
            known = ", ".join(sorted(routes)) or "none"
            report.error(path, f"no route member {route!r}: expected the id of a member of a "
                         f"route pool (route members: {known})")


def _check_rules(rules: object, channels: list[str], report: Reporter) -> None:
    if not isinstance(rules, list):
        return
    names: dict[str, int] = {}
    for k, raw in enumerate(rules):
        rule = raw_table(raw)
        name = rule.get("name")
        if isinstance(name, str):
            if name in names:
                report.error(("rules", k, "name"), f"rule name {name!r} is already used by "
                             f"rules[{names[name]}]")
            names.setdefault(name, k)
        notify = rule.get("notify")
        for n, item in enumerate(notify if isinstance(notify, list) else []):
            if isinstance(item, str) and item.startswith("channel:") \
                    and item[len("channel:"):] not in channels:
                known = ", ".join(channels) or "none are defined"
                report.error(("rules", k, "notify", n), f"unknown channel {item[8:]!r}: "
                             f"expected one of the [channels] of cadenza.toml ({known})")
        channel = rule.get("channel")
        if isinstance(channel, str) and channel not in channels:
            known = ", ".join(channels) or "none are defined"
            report.error(("rules", k, "channel"), f"unknown channel {channel!r}: expected one "
                         f"of the [channels] of cadenza.toml ({known})")
        elif channel is None and not channels and rule:
            report.error(("rules", k), "no channel to notify through: define a "
                         "[channels.NAME] or set channel", at="key")


def plaintext_secrets(value: object, path: KeyPath, report: Reporter, file: str) -> None:
    """Warn about values that look like secrets written in clear (keys named like
    password/token/secret/api_key/authorization/cookie, passwords inside URLs)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = (*path, key)
            if isinstance(item, str) and item and "${" not in item \
                    and _SECRET_KEY.search(str(key)):
                report.warning(where, _secret_advice(file))
            else:
                plaintext_secrets(item, where, report, file)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            plaintext_secrets(item, (*path, k), report, file)
    elif isinstance(value, str):
        match = _URL_PASSWORD.search(value)
        if match and "${" not in match.group(1):
            report.warning(path, "this URL holds a password in clear: " + _secret_advice(file))


def _secret_advice(file: str) -> str:
    if file == "jobs.toml":
        return ("this looks like a secret written in clear; secrets never live in jobs.toml: "
                "put it in a connection of cadenza.toml as ${secret.NAME}")
    return ("this looks like a secret written in clear: store it with `cadenza secrets set "
            "NAME` and write ${secret.NAME}")
