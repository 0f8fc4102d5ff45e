"""The sender's own checks under a FakeClock: a run RUNNING past ``long_run`` warns once; a
schedule that should have fired and has no run row after its grace (the scheduler is down
or wedged) alerts once until it fires again."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from notify_home import START, channels, notify_bench
from tests.support.mailhooks import smtp_server, webhook_receiver

from cadenza.store.fires import NewFire

LONG = """
[jobs.slow]
[jobs.slow.alerts]
recipients = ["role:ops"]
long_run = "2s"
[[jobs.slow.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"
"""


def test_long_run_warns_once_per_run(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, LONG, channels(smtp.port, hook.url)) as bench:
        run_id = bench.store.create_run("slow", "manual:test")
        bench.store.claim_runs("test:1:1", START + timedelta(minutes=5), run_ids=[run_id])
        bench.clock.advance(timedelta(seconds=1.5))
        assert bench.sender.notifier.check_long_runs(bench.clock.now()) == 0
        bench.clock.advance(timedelta(seconds=0.5))
        assert bench.sender.notifier.check_long_runs(bench.clock.now()) == 1
        bench.sender.round()
        bench.clock.advance(timedelta(minutes=1))
        bench.sender.round()
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org"]
        mail = smtp.inbox.to("alice@example.org")[0]
        assert mail["Subject"].startswith("[cadenza] slow is still running")
        assert "running longer than 2s" in mail.get_body(("plain",)).get_content()


STALLED = """
[jobs.hourly]
schedule = "0 * * * *"
timezone = "UTC"
[[jobs.hourly.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"
"""
RULE = '[[rules]]\nname = "stall"\non = ["stalled"]\njobs = ["*"]\nnotify = ["role:ops"]\n'


def test_a_schedule_that_does_not_fire_alerts_once(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, STALLED, channels(smtp.port, hook.url, RULE)) as bench:
        check = bench.sender.notifier.check_stalled
        since = START  # 08:00: the sender started; the 09:00 fire is owed
        bench.clock.advance(timedelta(hours=1, minutes=1, seconds=59))
        assert check(bench.clock.now(), since) == 0  # within missed_grace + margin
        bench.clock.advance(timedelta(seconds=1))
        assert check(bench.clock.now(), since) == 1
        bench.clock.advance(timedelta(hours=1))  # 10:02: still nothing; no second alert
        assert check(bench.clock.now(), since) == 0
        bench.sender.round()
        assert sorted(a for rcpt, _ in smtp.inbox.mails for a in rcpt) == [
            "alice@example.org", "bob@example.org"]
        mail = smtp.inbox.to("bob@example.org")[0]
        assert mail["Subject"].strip() == ("[cadenza] hourly did not fire at 2027-01-05 "
                                           "09:00 UTC")
        assert "its schedule job should have fired" in mail.get_body(("plain",)).get_content()
        # The scheduler comes back and records 11:00; then 12:00 is silent again: one more.
        eleven = START.replace(hour=11)
        bench.store.create_fires([NewFire("hourly", "job", eleven)])
        bench.clock.advance(eleven + timedelta(hours=1, minutes=2) - bench.clock.now())
        assert check(bench.clock.now(), since) == 1


def test_no_stalled_rule_no_check(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, STALLED, channels(smtp.port, hook.url)) as bench:
        bench.clock.advance(timedelta(hours=5))
        assert bench.sender.notifier.check_stalled(bench.clock.now(), START) == 0


DEADLINES = """
[jobs.hog]
requires = { db = 1 }
[[jobs.hog.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"

[jobs.nightly]
schedule = "0 8 * * *"
timezone = "UTC"
requires = { db = 1 }
start_by = "30m"
finish_by = "09:00"
[jobs.nightly.alerts]
recipients = ["role:ops"]
[[jobs.nightly.steps]]
name = "noop"
type = "python"
callable = "cz_notify_tasks:ok"
isolation = "thread"
"""
POOL = '[pools.db]\nkind = "unit"\nmembers = [{ id = "db1" }]\n'


def test_deadlines_alert_once_while_the_run_is_late(tmp_path: Path) -> None:
    """A run queued behind a full pool past its start_by alerts once before it starts; past
    its finish_by, once while RUNNING; the run's history says it each time."""
    from cadenza.assembly import assemble
    from cadenza.domain.states import RunState
    from cadenza.resources.plan import PoolPlan
    from cadenza.resources.pools import sync_members

    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, DEADLINES, channels(smtp.port, hook.url, POOL)) as bench:
        check = bench.sender.notifier.check_late
        store = bench.store
        plan = PoolPlan.of(bench.config)  # the pools as a node's start sets them up
        sync_members(store, plan)
        assemble(store).configure(plan=plan)
        hog = store.create_run("hog", "manual:test")
        lease_until = START + timedelta(hours=4)
        hog_lease = START + timedelta(minutes=40)  # its worker is lost: reaped at 08:40
        assert [r.id for r in store.claim_runs("test:1:1", hog_lease, run_ids=[hog])] == [hog]
        [nightly] = [r for r in store.create_fires([NewFire("nightly", "job", START)]) if r]
        assert store.claim_runs("test:1:1", lease_until, run_ids=[nightly]) == []  # pool full
        bench.clock.advance(timedelta(minutes=29, seconds=59))
        assert check(bench.clock.now()) == 0
        bench.clock.advance(timedelta(seconds=1))  # 08:30: start_by passed, still QUEUED
        assert check(bench.clock.now()) == 1
        bench.clock.advance(timedelta(minutes=5))
        assert check(bench.clock.now()) == 0  # once
        bench.sender.round()
        late = smtp.inbox.to("alice@example.org")
        assert [m["Subject"] for m in late] == ["[cadenza] nightly is late (2027-01-05 08:00 UTC)"]
        assert "not started by its deadline start_by = 30m" in \
            late[0].get_body(("plain",)).get_content()
        assert store.get_run(nightly).state is RunState.QUEUED  # told before it started
        bench.clock.set(START.replace(minute=41))
        assert [r.run_id for r in store.reap_expired_run_leases()] == [hog]  # frees db1
        bench.clock.set(START.replace(minute=50))  # past the member's cooldown
        claimed = store.claim_runs("test:1:1", lease_until, run_ids=[nightly])
        assert [r.id for r in claimed] == [nightly]
        bench.clock.set(START.replace(hour=8, minute=59, second=59))
        assert check(bench.clock.now()) == 0
        bench.clock.advance(timedelta(seconds=1))  # 09:00: finish_by, still RUNNING
        assert check(bench.clock.now()) == 1
        assert check(bench.clock.now()) == 0
        bench.sender.round()
        late = smtp.inbox.to("alice@example.org")
        assert "not finished by its deadline finish_by = 09:00" in \
            late[1].get_body(("plain",)).get_content()
        events = [e for e in store.list_events(run_id=nightly) if e.event_type == "RUN_LATE"]
        assert [e.message.split(" (")[0] for e in events] == [
            "late: not started by start_by = 30m", "late: not finished by finish_by = 09:00"]
        # the runs list marks it late; the run page's log shows the two events
        import warnings

        from cadenza.home import Home
        from cadenza.security import hash_password
        from cadenza.web.app import create_app
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fastapi.testclient import TestClient
        store.add_user("dana", hash_password("pass phrase 1"), ["viewer"])
        app = create_app(store, home=Home(bench.home))
        with TestClient(app, base_url="http://testserver") as browser:
            login = browser.post("/api/login", json={"username": "dana",
                                                     "password": "pass phrase 1"})
            assert login.status_code == 200
            listed = browser.get("/runs").text
            row = next(r for r in listed.split("<tr") if f"/runs/{nightly}" in r)
            assert 'class="tag run-late" title="finish_by, start_by">late</span>' in row
            page = browser.get(f"/runs/{nightly}").text
            assert "late: not started by start_by = 30m" in page


def test_a_run_that_ended_before_its_deadline_is_not_late(tmp_path: Path) -> None:
    with smtp_server() as smtp, webhook_receiver() as hook, \
            notify_bench(tmp_path, DEADLINES, channels(smtp.port, hook.url, POOL)) as bench:
        [nightly] = [r for r in bench.store.create_fires([NewFire("nightly", "job", START)])
                     if r]
        bench.executor.execute(nightly)
        bench.clock.advance(timedelta(hours=2))
        assert bench.sender.notifier.check_late(bench.clock.now()) == 0
        bench.sender.round()
        assert smtp.inbox.mails == []
