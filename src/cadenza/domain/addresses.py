"""E-mail addresses as Cadenza takes them: one plain ``name@example.org``, strictly.

An address is checked where it is entered (a user's e-mail, a channel's sender, a rule's or
an alert's recipients, a ``notify`` step's ``to``, "Send test") and again before a message
is sent (a ``${...}`` value, an address stored by an older version). :func:`check_email`
parses it with the standard library's RFC 5322 parser (``email.headerregistry.Address``)
and refuses, on top of what that parser refuses, whatever would change a header or the
envelope rather than name one mailbox:

* control characters (CR and LF would start a new header: ``x@y.z\\r\\nBcc: ...``);
* a display name, a comment, a list or a group (``"Ops" <ops@x.org>``, ``a@x.org, b@y.org``,
  ``a(c)@x.org``): the characters ``< > , ; : " ( ) [ ] \\`` and blanks;
* a domain without a dot or with a malformed label (``a@b``, ``a@-x.org``, ``a@x..org``)
  and a domain literal (``a@[10.0.0.1]``);
* more than 64 characters before the ``@`` or 254 in all (RFC 5321's limits).

Nothing here reads the network: whether the mailbox exists is the SMTP server's answer.
"""

from __future__ import annotations

import re
from email.errors import MessageError
from email.headerregistry import Address

MAX_LOCAL_PART = 64
MAX_ADDRESS = 254
_FORBIDDEN = frozenset('<>,;:"()[]\\ \t')
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


class InvalidAddress(ValueError):
    """Not one plain e-mail address; the message says why (without the address)."""


def check_email(text: str) -> str:
    """``text`` when it is one plain e-mail address (see the module docstring); raises
    :class:`InvalidAddress` saying what is wrong otherwise."""
    if not text:
        raise InvalidAddress("it is empty")
    control = next((c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0), None)
    if control is not None:
        raise InvalidAddress(f"it contains the control character {control!r}")
    if len(text) > MAX_ADDRESS:
        raise InvalidAddress(f"it is longer than {MAX_ADDRESS} characters")
    odd = next((c for c in text if c in _FORBIDDEN), None)
    if odd is not None:
        raise InvalidAddress(f"it contains {odd!r}: give one plain address like "
                             "name@example.org, without a display name, comment or list")
    if text.count("@") != 1:
        raise InvalidAddress("expected exactly one '@', as in name@example.org")
    try:
        parsed = Address(addr_spec=text)
    except (MessageError, ValueError, TypeError, IndexError) as exc:
        raise InvalidAddress(f"it does not parse as an address: {exc}") from None
    if parsed.addr_spec != text or not parsed.username:
        raise InvalidAddress("expected one plain address like name@example.org")
    if len(parsed.username) > MAX_LOCAL_PART:
        raise InvalidAddress(f"the part before '@' is longer than {MAX_LOCAL_PART} characters")
    _check_domain(parsed.domain)
    return text


def is_email(text: str) -> bool:
    """Whether :func:`check_email` takes ``text``."""
    try:
        check_email(text)
    except InvalidAddress:
        return False
    return True


def _check_domain(domain: str) -> None:
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        raise InvalidAddress(f"the domain {domain!r} is not a valid host name") from None
    labels = ascii_domain.split(".")
    if len(labels) < 2:
        raise InvalidAddress(f"the domain {domain!r} has no dot (as in name@example.org)")
    if not all(_LABEL.fullmatch(label) for label in labels) or labels[-1].isdigit():
        raise InvalidAddress(f"the domain {domain!r} is not a valid host name")
