"""Admission (SPEC §9): which queued run starts, and the reason every other one waits."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.config import load_home
from cadenza.config.admission_limits import limits_from_loaded, server_timezone
from cadenza.domain.admission import (
    HOUR,
    Candidate,
    Decision,
    JobLimits,
    JobSpec,
    Limits,
    Load,
    TagSpec,
    WaitReason,
    WaitRule,
    admit,
    limits_from_config,
    resources_reason,
)

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2027, 3, 1, 13, 0, tzinfo=UTC)  # Monday 14:00 in Paris


def run(
    run_id: str,
    job: str,
    *,
    priority: int = 0,
    at: datetime = NOW - timedelta(minutes=5),
    not_before: datetime | None = None,
    attempt: int = 0,
    requeued: bool = False,
) -> Candidate:
    return Candidate(run_id, job, at, priority, not_before, attempt, requeued)


def limits(
    jobs: dict[str, JobSpec],
    tags: dict[str, TagSpec] | None = None,
    max_concurrent_runs: int = 16,
) -> Limits:
    return limits_from_config(
        max_concurrent_runs=max_concurrent_runs, jobs=jobs, tags=tags, default_timezone=PARIS
    )


def ids(decision: Decision) -> list[str]:
    return [c.run_id for c in decision.admitted]


def reason(decision: Decision, run_id: str) -> WaitReason:
    return decision.waiting[run_id]


# --- order ---------------------------------------------------------------------------------


def test_priority_then_scheduled_time_then_id_whatever_the_input_order() -> None:
    lim = limits({j: {"max_concurrency": 10} for j in "abc"})
    runs = [
        run("r1", "a", priority=0, at=NOW - timedelta(minutes=1)),
        run("r2", "b", priority=5, at=NOW - timedelta(minutes=1)),
        run("r3", "c", priority=0, at=NOW - timedelta(minutes=9)),
        run("r0", "c", priority=0, at=NOW - timedelta(minutes=9)),
    ]
    decision = admit(reversed(runs), lim, Load(), NOW, free_slots=3)
    assert ids(decision) == ["r2", "r0", "r3"]
    assert reason(decision, "r1") == WaitReason(
        "no free worker on this node", None, WaitRule.NODE_WORKERS
    )


# --- global rules ----------------------------------------------------------------------------


def test_global_cap_counts_running_runs_of_every_node() -> None:
    lim = limits({"a": {"max_concurrency": 10}}, max_concurrent_runs=3)
    load = Load(running_total=2, running_by_job={"other": 2})
    decision = admit([run(f"r{i}", "a") for i in range(3)], lim, load, NOW, free_slots=4)
    assert ids(decision) == ["r0"]
    assert reason(decision, "r1") == WaitReason(
        "max_concurrent_runs 3 reached", None, WaitRule.MAX_CONCURRENT_RUNS
    )


def test_no_free_worker_on_this_node() -> None:
    lim = limits({"a": {"max_concurrency": 10}})
    decision = admit([run("r0", "a"), run("r1", "a")], lim, Load(), NOW, free_slots=0)
    assert ids(decision) == []
    assert {w.rule for w in decision.waiting.values()} == {WaitRule.NODE_WORKERS}


# --- job and tag concurrency --------------------------------------------------------------------


def test_job_max_concurrency_counts_running_and_just_admitted_runs() -> None:
    lim = limits({"sales-load": {"max_concurrency": 2}})
    load = Load(1, {"sales-load": 1})
    decision = admit([run(f"r{i}", "sales-load") for i in range(3)], lim, load, NOW, 8)
    assert ids(decision) == ["r0"]
    assert reason(decision, "r1") == WaitReason(
        "job sales-load already runs 2 of max_concurrency 2", None, WaitRule.JOB_CONCURRENCY
    )
    one = admit([run("r9", "sales-load")], limits({"sales-load": {}}), load, NOW, 8)
    assert one.waiting["r9"].text == "job sales-load already runs 1 of max_concurrency 1"


def test_tag_max_concurrency_is_shared_by_the_jobs_carrying_the_tag() -> None:
    lim = limits(
        {"a": {"tags": ["scraping"], "max_concurrency": 5},
         "b": {"tags": ["scraping", "scraping"], "max_concurrency": 5}},
        {"scraping": {"max_concurrency": 2}},
    )
    load = Load(1, {"a": 1})
    queued = [run("b1", "b", priority=1), run("b2", "b", priority=1), run("a1", "a")]
    decision = admit(queued, lim, load, NOW, 8)
    assert ids(decision) == ["b1"]
    assert reason(decision, "b2") == WaitReason(
        "tag scraping at max_concurrency 2", None, WaitRule.TAG_CONCURRENCY
    )
    assert reason(decision, "a1").rule is WaitRule.TAG_CONCURRENCY


# --- budgets ----------------------------------------------------------------------------------


def test_tag_budget_of_three_per_hour_starts_three_and_names_the_next_slot() -> None:
    lim = limits(
        {"scrape-a": {"tags": ["scraping"], "max_concurrency": 10},
         "scrape-b": {"tags": ["scraping"], "max_concurrency": 10}},
        {"scraping": {"budget_per_hour": 3}},
    )
    queued = [run(f"r{i}", "scrape-a" if i % 2 else "scrape-b") for i in range(6)]
    first = admit(queued, lim, Load(), NOW, free_slots=8)
    assert ids(first) == ["r0", "r1", "r2"]
    for run_id in ("r3", "r4", "r5"):
        assert reason(first, run_id) == WaitReason(
            "budget 3/h for tag scraping used; next slot 15:00",  # 14:00 in Paris + 1h
            NOW + HOUR,
            WaitRule.TAG_BUDGET,
        )
    assert first.next_check == NOW + HOUR
    # They finish quickly; the budget still holds until the first start is an hour old.
    load = Load(0, {}, {"scrape-a": [NOW], "scrape-b": [NOW, NOW]})
    rest = queued[3:]
    assert ids(admit(rest, lim, load, NOW + timedelta(minutes=59), 8)) == []
    assert ids(admit(rest, lim, load, NOW + HOUR, 8)) == ["r3", "r4", "r5"]


def test_budget_next_slot_is_the_oldest_start_that_must_expire_rounded_up() -> None:
    lim = limits({"job": {"budget_per_hour": 2, "max_concurrency": 9}})
    starts = [NOW - timedelta(minutes=52, seconds=50), NOW - timedelta(minutes=40),
              NOW - timedelta(minutes=70)]  # the last one is out of the rolling hour
    decision = admit([run("r", "job")], lim, Load(0, {}, {"job": starts}), NOW, 1)
    slot = NOW - timedelta(minutes=52, seconds=50) + HOUR  # 13:07:10 UTC
    assert reason(decision, "r") == WaitReason(
        "budget 2/h for job job used; next slot 14:08", slot, WaitRule.JOB_BUDGET
    )
    assert ids(admit([run("r", "job")], lim, Load(0, {}, {"job": starts}), slot, 1)) == ["r"]


def test_a_start_exactly_an_hour_ago_has_freed_its_slot() -> None:
    lim = limits({"job": {"budget_per_hour": 1}})
    load = Load(0, {}, {"job": [NOW - HOUR]})
    assert ids(admit([run("r", "job")], lim, load, NOW, 1)) == ["r"]
    load = Load(0, {}, {"job": [NOW - HOUR + timedelta(microseconds=1)]})
    assert ids(admit([run("r", "job")], lim, load, NOW, 1)) == []


def test_budget_slot_on_another_day_names_the_day() -> None:
    late = datetime(2027, 3, 1, 22, 30, tzinfo=UTC)  # 23:30 in Paris
    lim = limits({"job": {"budget_per_hour": 1}})
    decision = admit([run("r", "job")], lim, Load(0, {}, {"job": [late]}), late, 1)
    assert reason(decision, "r").text == "budget 1/h for job job used; next slot Tue 00:30"


# --- windows ------------------------------------------------------------------------------------


def test_outside_window_waits_until_it_opens() -> None:
    lim = limits({"report": {"windows": ["mon-fri 08:00-18:00"]}})
    saturday = datetime(2027, 3, 6, 11, 0, tzinfo=UTC)
    decision = admit([run("r", "report")], lim, Load(), saturday, 4)
    monday_8 = datetime(2027, 3, 8, 7, 0, tzinfo=UTC)
    assert reason(decision, "r") == WaitReason(
        "outside window mon-fri 08:00-18:00; opens Mon 08:00", monday_8, WaitRule.WINDOW
    )
    assert decision.next_check == monday_8
    assert ids(admit([run("r", "report")], lim, Load(), monday_8, 4)) == ["r"]
    assert ids(admit([run("r", "report")], lim, Load(), NOW, 4)) == ["r"]


def test_window_is_evaluated_in_the_job_zone() -> None:
    lim = limits({"ny": {"windows": ["09:00-10:00"], "timezone": "America/New_York"}})
    at = datetime(2027, 3, 1, 13, 30, tzinfo=UTC)  # 08:30 in New York
    decision = admit([run("r", "ny")], lim, Load(), at, 1)
    assert decision.waiting["r"].until == datetime(2027, 3, 1, 14, 0, tzinfo=UTC)
    assert decision.waiting["r"].text.endswith("opens Mon 09:00")


def test_several_windows_crossing_midnight() -> None:
    lim = limits({"night": {"windows": ["fri 22:00-06:00", "sun 20:00-21:00"]}})
    saturday_7 = datetime(2027, 3, 6, 6, 0, tzinfo=UTC)
    decision = admit([run("r", "night")], lim, Load(), saturday_7, 1)
    assert reason(decision, "r").text == (
        "outside windows fri 22:00-06:00, sun 20:00-21:00; opens Sun 20:00"
    )
    saturday_5 = datetime(2027, 3, 6, 4, 0, tzinfo=UTC)  # opened on Friday evening
    assert ids(admit([run("r", "night")], lim, Load(), saturday_5, 1)) == ["r"]


def test_window_on_the_spring_dst_night_in_paris() -> None:
    lim = limits({"j": {"windows": ["sun 02:30-04:00"]}})
    before = datetime(2027, 3, 28, 0, 0, tzinfo=UTC)  # 01:00 CET
    why = admit([run("r", "j")], lim, Load(), before, 1).waiting["r"]
    assert why.until == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert why.text.endswith("opens Sun 03:00")  # 02:30 never shows: the clocks jump to 03:00


# --- not_before -------------------------------------------------------------------------------


def test_not_before_and_its_wording() -> None:
    lim = limits({"j": {"max_concurrency": 9}})
    later = NOW + timedelta(minutes=5, seconds=30)
    queued = [
        run("retry", "j", not_before=later, attempt=1, requeued=True),
        run("deferred", "j", not_before=later, requeued=True),
        run("jitter", "j", not_before=later + timedelta(microseconds=1)),
        run("days", "j", not_before=NOW + timedelta(days=2)),
        run("weeks", "j", not_before=NOW + timedelta(days=30)),
        run("past", "j", not_before=NOW),
    ]
    decision = admit(queued, lim, Load(), NOW, 9)
    assert ids(decision) == ["past"]
    texts = {k: v.text for k, v in decision.waiting.items()}
    assert texts == {
        "retry": "not before 14:05:30 (retry backoff)",
        "deferred": "not before 14:05:30 (deferred)",
        "jitter": "not before 14:05:31",
        "days": "not before Wed 14:00:00",
        "weeks": "not before 2027-03-31 15:00:00",
    }
    assert decision.waiting["retry"].until == later
    assert decision.waiting["retry"].rule is WaitRule.NOT_BEFORE


def test_the_time_rule_that_clears_last_is_named() -> None:
    lim = limits({"j": {"windows": ["15:00-16:00"], "max_concurrency": 9}})
    soon = run("soon", "j", not_before=NOW + timedelta(minutes=10))
    late = run("late", "j", not_before=NOW + timedelta(hours=3))
    decision = admit([soon, late], lim, Load(), NOW, 9)
    assert decision.waiting["soon"].rule is WaitRule.WINDOW
    assert decision.waiting["late"].rule is WaitRule.NOT_BEFORE


def test_time_rules_are_named_before_capacity_rules() -> None:
    lim = limits({"j": {"windows": ["15:00-16:00"]}})
    decision = admit([run("r", "j")], lim, Load(1, {"j": 1}), NOW, 9)
    assert decision.waiting["r"].rule is WaitRule.WINDOW


# --- starvation ----------------------------------------------------------------------------


def test_a_blocked_high_priority_job_does_not_hold_other_jobs() -> None:
    lim = limits({
        "busy": {"max_concurrency": 1},
        "closed": {"windows": ["sat 00:00-01:00"]},
        "spent": {"budget_per_hour": 1},
        "low": {"max_concurrency": 5},
    })
    load = Load(1, {"busy": 1}, {"spent": [NOW - timedelta(minutes=1)]})
    queued = [
        run("busy1", "busy", priority=9),
        run("closed1", "closed", priority=9),
        run("spent1", "spent", priority=9),
        run("held", "low", priority=8, not_before=NOW + HOUR),
        run("low1", "low", priority=0),
        run("low2", "low", priority=0),
    ]
    decision = admit(queued, lim, load, NOW, free_slots=1)
    assert ids(decision) == ["low1"]
    assert decision.waiting["low2"].rule is WaitRule.NODE_WORKERS


def test_global_rules_hold_every_run_behind_them() -> None:
    lim = limits({"a": {"max_concurrency": 5}, "b": {"max_concurrency": 5}})
    decision = admit([run("a1", "a", priority=5), run("b1", "b")], lim, Load(), NOW, 0)
    assert ids(decision) == []
    assert {w.rule for w in decision.waiting.values()} == {WaitRule.NODE_WORKERS}


def test_a_run_of_a_job_no_longer_configured_waits_and_holds_nobody() -> None:
    lim = limits({"a": {}})
    decision = admit([run("gone", "removed", priority=9), run("a1", "a")], lim, Load(), NOW, 1)
    assert ids(decision) == ["a1"]
    assert decision.waiting["gone"] == WaitReason(
        "job removed is not defined in jobs.toml", None, WaitRule.UNKNOWN_JOB
    )


# --- helpers --------------------------------------------------------------------------------


def test_decision_helpers_and_resources_reason() -> None:
    lim = limits({"j": {"windows": ["15:00-16:00"]}})
    decision = admit([run("r", "j"), run("s", "other")], lim, Load(), NOW, 1)
    assert decision.wait_texts() == {
        "r": "outside window 15:00-16:00; opens Mon 15:00",
        "s": "job other is not defined in jobs.toml",
    }
    assert decision.next_check == datetime(2027, 3, 1, 14, 0, tzinfo=UTC)
    assert admit([], lim, Load(), NOW, 1).next_check is None
    why = resources_reason({"egress": 1, "accounts": 2}, {"egress": 0})
    assert why == WaitReason(
        "waiting for resources: accounts (needs 2, 0 free), egress (needs 1, 0 free)",
        None,
        WaitRule.RESOURCES,
    )


def test_load_arithmetic() -> None:
    load = Load().with_started("a", NOW).with_started("a", NOW).with_finished("a")
    assert (load.running_total, dict(load.running_by_job)) == (1, {"a": 1})
    assert load.starts_by_job["a"] == (NOW, NOW)
    with pytest.raises(ValueError, match="no run of b"):
        load.with_finished("b")


def test_admit_needs_an_aware_now() -> None:
    with pytest.raises(ValueError, match="aware"):
        admit([], limits({}), Load(), datetime(2027, 3, 1), 1)


def test_limits_from_config_defaults_and_errors() -> None:
    lim = limits_from_config(max_concurrent_runs=4, jobs={"j": {}}, default_timezone="UTC")
    assert lim.jobs["j"] == JobLimits(1, 0, (), ZoneInfo("UTC"), ())
    assert lim.budgeted_jobs() == frozenset()
    with pytest.raises(ValueError, match="expected a window"):
        limits_from_config(max_concurrent_runs=4, jobs={"j": {"windows": ["soon"]}})
    with pytest.raises(ValueError, match="max_concurrency"):
        limits_from_config(max_concurrent_runs=4, jobs={"j": {"max_concurrency": 0}})
    with pytest.raises(ValueError, match="max_concurrent_runs"):
        limits_from_config(max_concurrent_runs=0, jobs={})
    tagged = limits({"a": {"tags": ["t"]}, "b": {"budget_per_hour": 2}, "c": {"tags": ["u"]}},
                    {"t": {"budget_per_hour": 5}, "u": {"max_concurrency": 1}})
    assert tagged.budgeted_jobs() == {"a", "b"}


STEP = '[[jobs.{}.steps]]\nname = "q"\ntype = "sql_query"\nconnection = "db"\nquery = "SELECT 1"\n'


def test_limits_from_a_loaded_home(tmp_path: Path) -> None:
    (tmp_path / "cadenza.toml").write_text(
        "[workers]\ncount = 2\nmax_concurrent_runs = 7\n\n"
        "[limits.tags.scraping]\nmax_concurrency = 2\nbudget_per_hour = 120\n\n"
        '[connections.db]\ntype = "sql"\nurl = "sqlite:///data/db.sqlite"\n',
        encoding="utf-8",
    )
    (tmp_path / "jobs.toml").write_text(
        '[jobs.scrape]\ntags = ["scraping"]\ntimezone = "Europe/Paris"\nmax_concurrency = 3\n'
        'windows = ["mon-fri 08:00-18:00"]\nbudget_per_hour = 10\n'
        + STEP.format("scrape")
        + "\n[jobs.plain]\n"
        + STEP.format("plain"),
        encoding="utf-8",
    )
    lim = limits_from_loaded(load_home(tmp_path), default_timezone="America/New_York")
    assert lim.max_concurrent_runs == 7
    scrape = lim.jobs["scrape"]
    assert (scrape.max_concurrency, scrape.budget_per_hour, scrape.tags) == (3, 10, ("scraping",))
    assert scrape.timezone == PARIS
    assert [w.describe() for w in scrape.windows] == ["mon-fri 08:00-18:00"]
    assert lim.jobs["plain"].timezone == ZoneInfo("America/New_York")
    assert lim.tags["scraping"].max_concurrency == 2
    assert lim.tags["scraping"].budget_per_hour == 120


def test_server_timezone(tmp_path: Path) -> None:
    assert server_timezone({"TZ": "Europe/Paris"}, tmp_path / "none") == PARIS
    assert server_timezone({"TZ": ":Asia/Tokyo"}, tmp_path / "none") == ZoneInfo("Asia/Tokyo")
    assert server_timezone({"TZ": "Not/AZone"}, tmp_path / "none") == UTC
    assert server_timezone({}, tmp_path / "none") == UTC
    zones = tmp_path / "usr" / "share" / "zoneinfo" / "America"
    zones.mkdir(parents=True)
    (zones / "New_York").write_bytes(b"")
    link = tmp_path / "localtime"
    link.symlink_to(zones / "New_York")
    assert server_timezone({}, link) == ZoneInfo("America/New_York")


# --- simulations on a virtual clock ----------------------------------------------------------


def simulate(
    queued: Sequence[Candidate],
    lim: Limits,
    durations: Sequence[timedelta],
    tick: timedelta,
    workers: int,
    start: datetime = NOW,
    horizon: timedelta = timedelta(hours=6),
) -> dict[str, tuple[datetime, datetime]]:
    """Decide every ``tick``; a run admitted at t ends at t + its duration. Returns the
    recorded (start, end) of every run that ran."""
    pending = list(queued)
    load = Load()
    ending: list[tuple[datetime, str, str]] = []
    record: dict[str, tuple[datetime, datetime]] = {}
    now = start
    while pending and now < start + horizon:
        while ending and ending[0][0] <= now:
            _, job_id, _ = heapq.heappop(ending)
            load = load.with_finished(job_id)
        decision = admit(pending, lim, load, now, workers - load.running_total)
        load = load.after(decision, now)
        for c in decision.admitted:
            end = now + durations[int(c.run_id[1:]) % len(durations)]
            record[c.run_id] = (now, end)
            heapq.heappush(ending, (end, c.job_id, c.run_id))
        pending = [c for c in pending if c.run_id not in record]
        now += tick
    return record


def max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = current = 0
    for _, step in edges:  # an end at t sorts before a start at t
        current += step
        best = max(best, current)
    return best


@settings(max_examples=50, deadline=None)
@given(
    durations=st.lists(st.integers(1, 600).map(lambda s: timedelta(seconds=s)),
                       min_size=5, max_size=5),
    tick=st.integers(1, 120).map(lambda s: timedelta(seconds=s)),
    workers=st.integers(1, 6),
    others=st.integers(0, 4),
)
def test_five_runs_of_a_job_with_max_concurrency_2_never_overlap_more_than_2(
    durations: list[timedelta], tick: timedelta, workers: int, others: int
) -> None:
    lim = limits({"job": {"max_concurrency": 2}, "other": {"max_concurrency": 3}})
    queued = [run(f"r{i}", "job", at=NOW + timedelta(seconds=i)) for i in range(5)]
    queued += [run(f"o{i}", "other", priority=1) for i in range(others)]
    record = simulate(queued, lim, durations, tick, workers)
    assert {f"r{i}" for i in range(5)} <= record.keys()  # all ran
    assert max_overlap([v for k, v in record.items() if k.startswith("r")]) <= 2
    assert max_overlap(list(record.values())) <= workers


def test_tag_budget_spreads_starts_over_hours() -> None:
    lim = limits({"scrape": {"tags": ["scraping"], "max_concurrency": 10}},
                 {"scraping": {"budget_per_hour": 3}})
    queued = [run(f"r{i}", "scrape", at=NOW + timedelta(seconds=i)) for i in range(7)]
    record = simulate(queued, lim, [timedelta(minutes=1)], timedelta(minutes=1), workers=10)
    starts = sorted(s for s, _ in record.values())
    assert starts == [NOW] * 3 + [NOW + HOUR] * 3 + [NOW + 2 * HOUR]


job_names = st.sampled_from(["a", "b", "c", "d"])
job_specs = st.fixed_dictionaries(
    {},
    optional={
        "max_concurrency": st.integers(1, 3),
        "budget_per_hour": st.integers(0, 3),
        "tags": st.lists(st.sampled_from(["t", "u"]), max_size=2),
        "windows": st.sampled_from([[], ["mon 13:00-15:00"], ["tue 00:00-01:00"]]),
    },
)
tag_specs = st.fixed_dictionaries(
    {}, optional={"max_concurrency": st.integers(1, 3), "budget_per_hour": st.integers(0, 3)}
)


@settings(max_examples=200, deadline=None)
@given(
    jobs=st.dictionaries(job_names, job_specs, min_size=1),
    tags=st.dictionaries(st.sampled_from(["t", "u"]), tag_specs),
    queued=st.lists(
        st.tuples(job_names, st.integers(-1, 1), st.integers(0, 1000), st.booleans()),
        max_size=12,
    ),
    running=st.dictionaries(job_names, st.integers(0, 2)),
    recent=st.dictionaries(job_names, st.lists(st.integers(0, 7200), max_size=4)),
    free=st.integers(0, 5),
    cap=st.integers(1, 8),
)
def test_invariants(
    jobs: dict[str, JobSpec],
    tags: dict[str, TagSpec],
    queued: list[tuple[str, int, int, bool]],
    running: dict[str, int],
    recent: dict[str, list[int]],
    free: int,
    cap: int,
) -> None:
    lim = limits(jobs, tags, cap)
    load = Load(
        sum(running.values()),
        running,
        {j: [NOW - timedelta(seconds=s) for s in v] for j, v in recent.items()},
    )
    candidates = [
        run(f"r{k}", job, priority=prio, at=NOW - timedelta(seconds=age),
            not_before=NOW + HOUR if held else None)
        for k, (job, prio, age, held) in enumerate(queued)
    ]
    decision = admit(candidates, lim, load, NOW, free)
    admitted = {c.run_id for c in decision.admitted}
    # Every candidate is admitted or waits, never both.
    assert admitted.isdisjoint(decision.waiting)
    assert admitted | decision.waiting.keys() == {c.run_id for c in candidates}
    # Global and node limits.
    assert len(admitted) <= max(0, free)
    assert load.running_total + len(admitted) <= max(cap, load.running_total)
    after = load.after(decision, NOW)
    for job_id, job in lim.jobs.items():
        started = sum(1 for c in decision.admitted if c.job_id == job_id)
        if started:
            # Job concurrency and budget hold after the decision.
            assert after.running_by_job[job_id] <= job.max_concurrency
            if job.budget_per_hour:
                live = [s for s in after.starts_by_job[job_id] if s > NOW - HOUR]
                assert len(live) <= job.budget_per_hour
    for tag, tag_lim in lim.tags.items():
        members = [j for j, job in lim.jobs.items() if tag in job.tags]
        if not any(c.job_id in members for c in decision.admitted):
            continue
        if tag_lim.max_concurrency is not None:
            assert sum(after.running_by_job.get(j, 0) for j in members) <= tag_lim.max_concurrency
        if tag_lim.budget_per_hour:
            live = [s for j in members for s in after.starts_by_job.get(j, ())
                    if s > NOW - HOUR]
            assert len(live) <= tag_lim.budget_per_hour
    # No run is admitted after one held only by a global rule (priority is kept), and
    # every time-based wait says until when.
    order = sorted(candidates, key=lambda c: c.order_key)
    position = {c.run_id: k for k, c in enumerate(order)}
    global_rules = {WaitRule.MAX_CONCURRENT_RUNS, WaitRule.NODE_WORKERS}
    for run_id, why in decision.waiting.items():
        if why.rule in global_rules:
            assert all(position[a] < position[run_id] for a in admitted)
        assert (why.until is not None) == (
            why.rule in {WaitRule.NOT_BEFORE, WaitRule.WINDOW, WaitRule.JOB_BUDGET,
                         WaitRule.TAG_BUDGET}
        )
        if why.until is not None:
            assert why.until > NOW
