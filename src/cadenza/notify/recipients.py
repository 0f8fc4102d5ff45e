"""Recipients, resolved when a message is built (docs/notifications.md).

A recipient as written in ``cadenza.toml``, ``jobs.toml`` or a ``notify`` step is one of:

* an e-mail address, ``ops@example.org``;
* ``user:NAME``: that user's e-mail (the user must exist, be enabled and have one);
* ``role:NAME``: every enabled user with that role and an e-mail (built-in roles and groups
  such as ``ops`` alike);
* ``channel:NAME``: a delivery to that channel itself (a webhook: one POST).

A user's delivery carries the user's language and time zone: the message to them is written
in it (docs/notifications.md, "Language and time zone").

:func:`resolve` never raises: a name that gives nobody (a role with no users, an unknown or
disabled user, a user without e-mail) is a :class:`Delivery` with a ``problem``, which the
sender records as a FAILED delivery with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cadenza.store.records import UserRecord


class UserDirectory(Protocol):
    """Where users come from (the store)."""

    def list_users(self) -> list[UserRecord]: ...


@dataclass(frozen=True)
class Delivery:
    """One delivery of a message: ``channel`` and ``recipient`` (an address, or
    ``webhook:NAME`` for a webhook), or a ``problem`` saying why nobody could be reached."""

    channel: str
    recipient: str
    problem: str | None = None
    language: str | None = None
    """The recipient user's language (None: an address or a webhook: the server's)."""
    timezone: str | None = None
    """The recipient user's zone for times (None: the job's)."""


def resolve(written: Sequence[str], channel: str, channel_type: str,
            users: UserDirectory | Iterable[UserRecord]) -> list[Delivery]:
    """The deliveries of ``written`` through ``channel`` (of type ``email``, ``webhook`` or
    ``desktop``), each address once, in the order written."""
    known = users.list_users() if hasattr(users, "list_users") else list(users)
    if channel_type in ("webhook", "desktop"):
        # A webhook or the desktop has no addresses: the message goes once, whoever it names.
        deliveries = [Delivery(channel, f"{channel_type}:{channel}")]
        for item in written:
            kind, _, name = item.partition(":")
            if kind == "channel" and name != channel:
                deliveries.append(Delivery(name, f"channel:{name}"))
        return _unique(deliveries)
    out: list[Delivery] = []
    for item in written:
        kind, _, name = item.partition(":")
        if kind == "role":
            members = [u for u in known if name in u.roles and not u.disabled and u.email]
            if not members:
                out.append(Delivery(channel, item, f"role {name!r} has no enabled user with "
                                                   f"an e-mail address; nobody was notified"))
            out += [Delivery(channel, u.email or "", language=u.language,
                             timezone=u.timezone) for u in members]
        elif kind == "user":
            user = next((u for u in known if u.username == name), None)
            if user is None:
                out.append(Delivery(channel, item, f"no user {name!r}"))
            elif user.disabled:
                out.append(Delivery(channel, item, f"user {name!r} is disabled"))
            elif not user.email:
                out.append(Delivery(channel, item, f"user {name!r} has no e-mail address"))
            else:
                out.append(Delivery(channel, user.email, language=user.language,
                                    timezone=user.timezone))
        elif kind == "channel":
            out.append(Delivery(name, f"channel:{name}"))
        else:
            out.append(Delivery(channel, item.strip()))
    return _unique(out)


def _unique(deliveries: list[Delivery]) -> list[Delivery]:
    seen: set[tuple[str, str]] = set()
    out: list[Delivery] = []
    for d in deliveries:
        key = (d.channel, d.recipient.lower())
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
