"""Recipients resolved at send time: addresses, user:X, role:X, channel:X; a name that
reaches nobody is a delivery with a problem, never an exception."""

from __future__ import annotations

from datetime import UTC, datetime

from cadenza.notify.recipients import Delivery, resolve
from cadenza.store.records import UserRecord

NOW = datetime(2027, 1, 5, tzinfo=UTC)


def user(name: str, roles: tuple[str, ...], email: str | None, disabled: bool = False
         ) -> UserRecord:
    return UserRecord(name, None, email, roles, disabled, NOW, NOW)


USERS = [user("alice", ("ops",), "alice@example.org"),
         user("bob", ("ops", "viewer"), "bob@example.org"),
         user("dave", ("ops",), None),
         user("erin", ("ops",), "erin@example.org", disabled=True),
         user("carol", ("viewer",), "carol@example.org")]


def test_a_role_is_every_enabled_member_with_an_email_each_once() -> None:
    got = resolve(["role:ops", "bob@example.org", "user:carol", "ALICE@example.org"], "mail",
                  "email", USERS)
    assert got == [Delivery("mail", "alice@example.org"), Delivery("mail", "bob@example.org"),
                   Delivery("mail", "carol@example.org")]


def test_names_that_reach_nobody_are_problems() -> None:
    got = {d.recipient: d.problem for d in resolve(
        ["role:auditors", "user:ghost", "user:dave", "user:erin"], "mail", "email", USERS)}
    assert got == {
        "role:auditors": "role 'auditors' has no enabled user with an e-mail address; "
                         "nobody was notified",
        "user:ghost": "no user 'ghost'",
        "user:dave": "user 'dave' has no e-mail address",
        "user:erin": "user 'erin' is disabled"}


def test_a_webhook_is_posted_once_whoever_it_names() -> None:
    assert resolve(["role:ops", "x@example.org"], "chat", "webhook", USERS) == [
        Delivery("chat", "webhook:chat")]
    assert resolve(["channel:other"], "chat", "webhook", USERS) == [
        Delivery("chat", "webhook:chat"), Delivery("other", "channel:other")]


def test_channel_recipients_go_to_that_channel() -> None:
    assert resolve(["channel:chat", "a@example.org"], "mail", "email", USERS) == [
        Delivery("chat", "channel:chat"), Delivery("mail", "a@example.org")]
