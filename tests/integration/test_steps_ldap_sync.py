"""ldap_sync against a real slapd (tests/support/slapd.py: 5,000 people per unit, with
unicode, multi-valued and binary attributes) into SQLite, PostgreSQL and MariaDB tables."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "steps"))  # the shared test ctx
from executor_home import make_home
from sql_ctx import Db, SqlTestContext, database, execute, rows, run_step
from tests.support.slapd import READER_DN, READER_PW, SUFFIX, Slapd, dn_of, person, slapd

from cadenza.config.schema_settings import Settings
from cadenza.domain.errors import Fatal, Retryable
from cadenza.domain.states import RunState
from cadenza.executor.connections import Connections
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.steps.builtin.ldap_sync import LdapSyncStep
from cadenza.steps.builtin.lib.ldapsearch import ldap3
from cadenza.steps.runtime import StepResult

__all__ = ["slapd"]  # the session fixture, used by name

MAPPING = {"uid": "uid", "cn": "name", "mail": "mail", "telephoneNumber": "phones",
           "jpegPhoto": "photo", "dn": "dn"}


class LdapTestContext(SqlTestContext):
    """The SQL test context with ldap connections in its settings, and checkpoints kept
    the way the executor keeps them (the last one is read back by the next attempt)."""

    def __init__(self, home: Path, sql: Mapping[str, str], ldap: Mapping[str, dict[str, Any]],
                 **kwargs: Any) -> None:
        super().__init__(home, sql, step_type="ldap_sync", **kwargs)
        self._connections.close()
        self.settings = Settings.model_validate({
            "connections": {**{n: {"type": "sql", "url": u} for n, u in sql.items()},
                            **{n: {"type": "ldap", **d} for n, d in ldap.items()}}})
        self._connections = Connections(home, self.settings)
        self.checkpoints: list[Any] = []
        self.last_checkpoint: Any = None

    def checkpoint(self, state: Any) -> None:
        self.checkpoints.append(state)


def reader(server: Slapd, **extra: Any) -> dict[str, Any]:
    return {"url": server.url, "bind_dn": READER_DN, "password": READER_PW, **extra}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    else:
        url = str(request.getfixturevalue("pg_url" if request.param == "postgresql"
                                          else "mariadb_url"))
    yield from database(request.param, url)


def sync(ctx: LdapTestContext, base: str, table: str, **fields: Any) -> StepResult:
    values = {"connection": "dir", "base": base,
              "target": {"connection": "w", "table": table, "key": "uid"},
              "mapping": MAPPING, "filter": "(objectClass=inetOrgPerson)", **fields}
    return run_step(LdapSyncStep, ctx, **values)


def expected(people: Mapping[str, dict[str, list[str]]], ou: str) -> dict[str, tuple[Any, ...]]:
    """uid → (name, mail, phones, photo) as the table should hold them."""
    out = {}
    suffix = f",ou={ou},{SUFFIX}"
    for dn, attrs in people.items():
        if dn.endswith(suffix):
            out[attrs["uid"][0]] = (attrs["cn"][0], ";".join(sorted(attrs["mail"])),
                                    ";".join(sorted(attrs["telephoneNumber"])),
                                    attrs["jpegPhoto"][0])
    return out


def table_rows(url: str, table: str, soft: bool = False) -> dict[str, tuple[Any, ...]]:
    extra = ", deleted_at" if soft else ""
    return {r[0]: tuple(r[1:]) for r in rows(
        url, f"SELECT uid, name, mail, phones, photo{extra} FROM {table}")}


@pytest.fixture
def sync_ou(slapd: Slapd) -> Iterator[dict[str, dict[str, list[str]]]]:
    """The people of ou=sync as the directory holds them; a test may change them through
    :func:`change`, and they are put back afterwards."""
    people = {dn: {k: list(v) for k, v in attrs.items()} for dn, attrs in slapd.people.items()
              if dn.endswith(f",ou=sync,{SUFFIX}")}
    current = {dn: {k: list(v) for k, v in a.items()} for dn, a in people.items()}
    yield current
    admin = slapd.admin()
    try:
        for dn, attrs in people.items():
            if dn not in current:
                admin.add(dn, ["inetOrgPerson"], _ldap_values(attrs))
            elif current[dn] != attrs:
                admin.modify(dn, {k: [(ldap3.MODIFY_REPLACE, v)]
                                  for k, v in _ldap_values(attrs).items() if k != "uid"})
    finally:
        admin.unbind()


def _ldap_values(attrs: Mapping[str, list[str]]) -> dict[str, list[Any]]:
    return {k: [base64.b64decode(x) for x in v] if k == "jpegPhoto" else list(v)
            for k, v in attrs.items()}


@pytest.mark.slow
def test_the_table_equals_the_directory_and_a_second_sync_applies_exactly_the_changes(
        tmp_path: Path, slapd: Slapd, db: Db,
        sync_ou: dict[str, dict[str, list[str]]]) -> None:
    for mode in ("hard", "soft"):
        _sync_twice(tmp_path / mode, slapd, db, sync_ou, mode)


def _sync_twice(tmp_path: Path, slapd: Slapd, db: Db,
                people: dict[str, dict[str, list[str]]], mode: str) -> None:
    tmp_path.mkdir()
    table = db.table("ldap_people")
    ctx = LdapTestContext(tmp_path, {"w": db.url}, {"dir": reader(slapd)})
    soft = mode == "soft"
    try:
        first = sync(ctx, slapd.base("sync"), table, delete=mode, page_size=400,
                     batch_size=1000)
        assert first.output["fetched"] == len(people) == 5000
        assert first.output["pages"] == 13  # 400 per page: paged past the server's 500 limit
        assert (first.output["inserted"], first.output["updated"],
                first.output["deleted"]) == (5000, 0, 0)
        assert len(ctx.checkpoints) == 5  # one per committed batch of 1000
        want = expected(people, "sync")
        got = table_rows(db.url, table, soft)
        assert {k: v[:4] for k, v in got.items()} == want
        photo = base64.b64decode(got["sync-00042"][3])
        assert photo[:4] == b"\xff\xd8\xff\xe0" and photo[-1] == 255  # binary, intact
        assert got["sync-00077"][1] == "sync.77@alias.example.org;sync.77@example.org"
        assert "名前" in got["sync-04999"][0]
        for special in ("#lead, sync-00000", "a+b sync-00001", "back\\slash sync-00002"):
            [(dn,)] = rows(db.url, f"SELECT dn FROM {table} WHERE uid = :u", u=special)
            assert _uid_at(slapd, dn) == special  # the DN in the table finds its entry

        # 10 entries changed, 5 removed
        admin = slapd.admin()
        try:
            changed = [f"sync-{n:05d}" for n in range(100, 110)]
            for n, uid in enumerate(changed):
                dn = dn_of("sync", uid)
                if n < 5:
                    people[dn]["cn"] = [f"Renamed Ünïcødé {n}"]
                    admin.modify(dn, {"cn": [(ldap3.MODIFY_REPLACE, people[dn]["cn"])]})
                elif n < 8:
                    people[dn]["mail"] = [*people[dn]["mail"], f"extra{n}@example.org"]
                    admin.modify(dn, {"mail": [(ldap3.MODIFY_ADD, [f"extra{n}@example.org"])]})
                else:
                    photo = base64.b64encode(bytes(range(256))).decode()
                    people[dn]["jpegPhoto"] = [photo]
                    admin.modify(dn, {"jpegPhoto": [(ldap3.MODIFY_REPLACE,
                                                     [base64.b64decode(photo)])]})
            removed = [f"sync-{n:05d}" for n in range(200, 205)]
            for uid in removed:
                admin.delete(dn_of("sync", uid))
                del people[dn_of("sync", uid)]
        finally:
            admin.unbind()
        second = sync(ctx, slapd.base("sync"), table, delete=mode, page_size=400)
        assert {k: second.output[k] for k in ("fetched", "inserted", "updated", "deleted",
                                              "unchanged", "missing")} == {
            "fetched": 4995, "inserted": 0, "updated": 10, "deleted": 5, "unchanged": 4985,
            "missing": 5}
        assert second.rows == 15
        after = table_rows(db.url, table, soft)
        want = expected(people, "sync")
        if soft:
            assert {k for k, v in after.items() if v[4] is not None} == set(removed)
            assert {k: v[:4] for k, v in after.items() if k not in removed} == want
        else:
            assert {k: v[:4] for k, v in after.items()} == want
            assert not set(removed) & after.keys()
        # an entry that comes back: inserted again (hard), or its deleted_at cleared (soft)
        back = dn_of("sync", removed[0])
        people[back] = {k: list(v) for k, v in slapd.people[back].items()}
        admin = slapd.admin()
        try:
            admin.add(back, ["inetOrgPerson"], _ldap_values(people[back]))
        finally:
            admin.unbind()
        again = sync(ctx, slapd.base("sync"), table, delete=mode, page_size=400)
        assert {k: again.output[k] for k in ("inserted", "updated", "deleted", "unchanged")} == (
            {"inserted": 0, "updated": 1, "deleted": 0, "unchanged": 4995} if soft else
            {"inserted": 1, "updated": 0, "deleted": 0, "unchanged": 4995})
        assert table_rows(db.url, table, soft)[removed[0]][:4] == expected(
            people, "sync")[removed[0]]
        if soft:
            assert table_rows(db.url, table, soft)[removed[0]][4] is None
    finally:
        ctx.close()
    # put the directory back for the other mode
    admin = slapd.admin()
    try:
        for dn, attrs in slapd.people.items():
            if dn.endswith(f",ou=sync,{SUFFIX}") and people.get(dn) != attrs:
                if dn not in people:
                    admin.add(dn, ["inetOrgPerson"], _ldap_values(attrs))
                else:
                    admin.modify(dn, {k: [(ldap3.MODIFY_REPLACE, v)]
                                      for k, v in _ldap_values(attrs).items() if k != "uid"})
                people[dn] = {k: list(v) for k, v in attrs.items()}
    finally:
        admin.unbind()


def _uid_at(server: Slapd, dn: str) -> str:
    admin = server.admin()
    try:
        admin.search(dn, "(objectClass=*)", ldap3.BASE, attributes=["uid"])
        return str(admin.response[0]["attributes"]["uid"][0])
    finally:
        admin.unbind()


@pytest.mark.slow
@pytest.mark.reliability_case(53)
def test_a_directory_answering_60_percent_fewer_entries_fails_and_deletes_nothing(
        tmp_path: Path, slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)})
    base = slapd.base("shrink")
    try:
        for mode in ("hard", "soft"):
            assert sync(ctx, base, f"people_{mode}", delete=mode).output["inserted"] == 5000
        admin = slapd.admin()
        try:
            for n in range(2000, 5000):
                admin.delete(dn_of("shrink", person("shrink", n)["uid"][0]))
        finally:
            admin.unbind()
        for mode in ("hard", "soft"):
            with pytest.raises(Fatal) as info:
                sync(ctx, base, f"people_{mode}", delete=mode)
            message = str(info.value)
            assert "3000 of the table's 5000 rows (60.0%)" in message
            assert "max_delete_ratio = 0.2" in message and "nothing was deleted" in message
            assert rows(url, f"SELECT COUNT(*) FROM people_{mode}") == [(5000,)]
        assert rows(url, "SELECT COUNT(*) FROM people_soft WHERE deleted_at IS NOT NULL") == [
            (0,)]
        assert [e[0] for e in ctx.events] == ["LDAP_SYNC_ABORTED"] * 2
        # a ratio the user raised lets the same sync through
        done = sync(ctx, base, "people_hard", delete="hard", max_delete_ratio=0.6)
        assert done.output["deleted"] == 3000
        assert rows(url, "SELECT COUNT(*) FROM people_hard") == [(2000,)]
    finally:
        ctx.close()


def small(ctx: LdapTestContext, slapd: Slapd, table: str, **fields: Any) -> StepResult:
    return sync(ctx, slapd.base("small"), table, **fields)


@pytest.mark.reliability_case(53)
def test_a_filter_parameter_is_escaped(tmp_path: Path, slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    template = "(&(objectClass=inetOrgPerson)(uid=${params.who}))"

    def run(who: str, table: str) -> list[tuple[Any, ...]]:
        ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)},
                              params={"who": who})
        try:
            result = small(ctx, slapd, table, filter=template)
        finally:
            ctx.close()
        assert result.output["fetched"] == result.output["inserted"]
        return rows(url, f"SELECT uid FROM {table} ORDER BY uid")

    assert run("*)(uid=*", "injected") == []  # not 30 rows: the value is one literal uid
    assert run("small-0000*", "star") == []  # a * from a parameter is no wildcard
    assert run("small-00004", "one") == [("small-00004",)]
    assert run("back\\slash small-00002", "backslash") == [("back\\slash small-00002",)]
    assert run("#lead, small-00000", "comma") == [("#lead, small-00000",)]


def test_a_base_parameter_is_one_escaped_rdn_value(tmp_path: Path, slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    for ou, outcome in (("small", 30), ("small,dc=example", "noSuchObject")):
        ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)}, params={"ou": ou})
        try:
            if outcome == 30:
                assert sync(ctx, f"ou=${{params.ou}},{SUFFIX}", "by_ou").output["fetched"] == 30
            else:
                with pytest.raises(Fatal, match=r"base ou=small\\,dc\\=example,dc=example,"
                                                r"dc=org .*noSuchObject \(32\)"):
                    sync(ctx, f"ou=${{params.ou}},{SUFFIX}", "by_ou")
        finally:
            ctx.close()


def test_a_wrong_password_is_fatal_at_once_and_never_shown(tmp_path: Path,
                                                          slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    secret = "Wr0ng-pw;ldap+§"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd, password=secret)})
    try:
        with pytest.raises(Fatal) as info:
            small(ctx, slapd, "people")
    finally:
        ctx.close()
    message = str(info.value)
    assert "invalidCredentials (49)" in message and READER_DN in message
    assert "check the connection's bind_dn and password" in message
    assert secret not in message + ctx.log_record.text() + repr(ctx.events)


def test_starttls_and_ldaps_check_the_servers_certificate(tmp_path: Path,
                                                          slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ca = str(slapd.ca_file)
    starttls = reader(slapd, url=f"ldap://127.0.0.1:{slapd.port}", start_tls=True, ca_file=ca)
    ldaps = reader(slapd, url=slapd.ldaps_url, ca_file=ca)
    untrusted = reader(slapd, url=f"ldap://127.0.0.1:{slapd.port}", start_tls=True)
    unchecked = {**untrusted, "verify_tls": False}
    other_name = {**starttls, "url": f"ldap://127.0.0.2:{slapd.port}"}
    ctx = LdapTestContext(tmp_path, {"w": url}, {"tls": starttls, "ldaps": ldaps,
                                                 "untrusted": untrusted,
                                                 "unchecked": unchecked,
                                                 "other_name": other_name})
    try:
        for name in ("tls", "ldaps", "unchecked"):
            result = small(ctx, slapd, f"via_{name}", connection=name)
            assert result.output["fetched"] == 30, name
        with pytest.raises(Fatal, match=r"TLS failed: .*certificate verify failed"):
            small(ctx, slapd, "via_untrusted", connection="untrusted")
        with pytest.raises(Fatal, match=r"TLS failed: .*IP address mismatch"):
            small(ctx, slapd, "via_other_name", connection="other_name")
    finally:
        ctx.close()


def test_batches_commit_with_a_checkpoint_and_a_resumed_attempt_adds_up(
        tmp_path: Path, slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)})
    ctx.cancel = lambda: len(ctx.checkpoints) >= 2
    try:
        with pytest.raises(Fatal, match="step canceled"):
            small(ctx, slapd, "people", page_size=10, batch_size=10, delete="hard")
        assert rows(url, "SELECT COUNT(*) FROM people") == [(20,)]  # two batches committed
        assert ctx.checkpoints[-1]["inserted"] == 20
        ctx.cancel = False
        ctx.last_checkpoint = ctx.checkpoints[-1]
        result = small(ctx, slapd, "people", page_size=10, batch_size=10, delete="hard")
    finally:
        ctx.close()
    assert (result.output["fetched"], result.output["inserted"]) == (30, 30)
    assert result.output["unchanged"] == 20  # the committed rows were not written again
    assert rows(url, "SELECT COUNT(*) FROM people") == [(30,)]


def test_an_existing_table_chooses_the_attributes_and_json_keeps_lists(
        tmp_path: Path, slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)})
    try:
        conn = ctx.connection("w")
        conn.exec_driver_sql("CREATE TABLE people (uid TEXT PRIMARY KEY, mail TEXT, sn TEXT)")
        ctx.close()
        result = run_step(LdapSyncStep, ctx, connection="dir", base=slapd.base("small"),
                          target={"connection": "w", "table": "people", "key": "uid"},
                          multi_valued="json")  # every attribute, default filter: the ou too
        assert (result.output["fetched"], result.output["skipped"]) == (31, 1)
        assert result.output["inserted"] == 30
        got = dict((u, (m, s)) for u, m, s in rows(url, "SELECT uid, mail, sn FROM people"))
        assert got["small-00007"] == (
            '["small.7@alias.example.org", "small.7@example.org"]', '["Ñúñez 7"]')
        with pytest.raises(Fatal, match="has no column 'name'"):
            small(ctx, slapd, "people")
    finally:
        ctx.close()


JOBS = f"""
[jobs.directory]
retry = {{ attempts = 3 }}
[[jobs.directory.steps]]
name = "people"
type = "ldap_sync"
connection = "dir"
base = "ou=small,{SUFFIX}"
filter = "(objectClass=inetOrgPerson)"
mapping = {{ uid = "uid", cn = "name" }}
target = {{ connection = "wh", table = "people", key = "uid" }}
delete = "soft"
"""


def _executor_run(root: Path, slapd: Slapd, password: str) -> tuple[Any, list[Any], str]:
    """Run the job once through the executor with ``password`` as the secret; the outcome,
    its step runs, and every text the run left (events, log, outputs, errors, store file)."""
    home = Home(root.resolve())
    home.secrets.set("ldap_reader", password)
    config = home.load_config()
    store = home.open_store(config)
    executor = Executor(store, config)
    try:
        run_id = executor.enqueue("directory", RunRequest(), trigger="manual:test")
        outcome = executor.execute(run_id)
        steps = store.list_step_runs(run_id)
        events = store.list_events(run_id=run_id)
        logs = store.list_logs(run_id)
    finally:
        executor.close()
        store.close()
    texts = [repr(e.message) + repr(e.payload) for e in events]
    texts += [line.message for line in logs]
    texts += [repr(s.output) + repr(s.error) for s in steps]
    raw = b"".join(f.read_bytes() for f in (root / "data").glob("cadenza.db*"))
    return outcome, steps, "\n".join(texts) + raw.decode("utf-8", "replace")


def test_through_the_executor_a_wrong_secret_fails_at_once_and_appears_nowhere(
        tmp_path: Path, slapd: Slapd) -> None:
    root = make_home(tmp_path / "home", JOBS)
    with (root / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(f'\n[connections.dir]\ntype = "ldap"\nurl = "{slapd.url}"\n'
                 f'bind_dn = "{READER_DN}"\npassword = "${{secret.ldap_reader}}"\n')
    wrong = "Not-the-Reader-pw+9"
    outcome, steps, left = _executor_run(root, slapd, wrong)
    assert outcome.state is RunState.FAILED  # not QUEUED again: no retry
    [step] = steps
    assert (step.attempt, step.error_class) == (1, "fatal")
    assert "bind: invalidCredentials (49)" in (step.error or "")
    assert "invalidCredentials" in left
    assert wrong not in left and READER_PW not in left

    outcome, steps, left = _executor_run(root, slapd, READER_PW)
    assert outcome.state is RunState.SUCCEEDED
    [step] = steps
    assert (step.output["fetched"], step.output["inserted"], step.rows) == (30, 30, 30)
    assert READER_PW not in left
    assert rows(f"sqlite:///{(root / 'data' / 'wh.db').as_posix()}",
                "SELECT COUNT(*) FROM people WHERE deleted_at IS NULL") == [(30,)]


@pytest.mark.reliability_case(53)
def test_a_server_lost_mid_search_is_retryable_and_deletes_nothing(tmp_path: Path,
                                                                   slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)})
    fields = {"page_size": 10, "batch_size": 10, "delete": "hard"}
    try:
        assert small(ctx, slapd, "people", **fields).output["inserted"] == 30
        ctx.close()
        conn = ctx.connection("w")
        conn.exec_driver_sql("UPDATE people SET name = 'stale'")
        ctx.close()

        def stop_the_server(state: Any) -> None:  # after the first batch's commit
            ctx.checkpoints.append(state)
            slapd.stop()

        ctx.checkpoint = stop_the_server  # type: ignore[method-assign]
        try:
            with pytest.raises(Retryable, match=r"LDAP connection 'dir'.*search"):
                small(ctx, slapd, "people", **fields)
        finally:
            slapd.launch()
        assert rows(url, "SELECT COUNT(*) FROM people") == [(30,)]  # nothing deleted
        assert rows(url, "SELECT COUNT(*) FROM people WHERE name = 'stale'") == [(20,)]
        ctx.checkpoint = ctx.checkpoints.append  # type: ignore[method-assign]
        again = small(ctx, slapd, "people", **fields)
        assert (again.output["updated"], again.output["deleted"]) == (20, 0)
    finally:
        ctx.close()


def test_a_key_with_several_values_fails_before_any_delete(tmp_path: Path,
                                                           slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd)})
    try:
        with pytest.raises(Fatal, match=r"the key attribute 'mail' has 2 values"):
            run_step(LdapSyncStep, ctx, connection="dir", base=slapd.base("small"),
                     filter="(objectClass=inetOrgPerson)", attributes=["mail", "cn"],
                     target={"connection": "w", "table": "by_mail", "key": "mail"},
                     delete="hard")
        with pytest.raises(Fatal, match=r"attribute 'mial' is not in the directory's schema"):
            small(ctx, slapd, "typo", attributes=["mial"])
    finally:
        ctx.close()


def test_through_the_executor_too_few_entries_fail_the_run_and_mark_nothing(
        tmp_path: Path, slapd: Slapd) -> None:
    root = make_home(tmp_path / "home", JOBS)
    with (root / "cadenza.toml").open("a", encoding="utf-8") as fh:
        fh.write(f'\n[connections.dir]\ntype = "ldap"\nurl = "{slapd.url}"\n'
                 f'bind_dn = "{READER_DN}"\npassword = "${{secret.ldap_reader}}"\n')
    wh = f"sqlite:///{(root / 'data' / 'wh.db').as_posix()}"
    ghosts = ", ".join(f"('ghost-{n}', 'Ghost {n}', NULL)" for n in range(100))
    execute(wh, "CREATE TABLE people (uid TEXT PRIMARY KEY, name TEXT, deleted_at TIMESTAMP)",
            f"INSERT INTO people VALUES {ghosts}")
    outcome, steps, left = _executor_run(root, slapd, READER_PW)
    assert outcome.state is RunState.FAILED
    [step] = steps
    assert step.error_class == "fatal"
    assert "100 of the table's 100 rows (100.0%) have no entry" in (step.error or "")
    assert "LDAP_SYNC_ABORTED" in left
    assert rows(wh, "SELECT COUNT(*) FROM people WHERE deleted_at IS NULL") == [(130,)]


def test_a_bind_that_may_read_nothing_fails_and_deletes_nothing(
        tmp_path: Path, slapd: Slapd) -> None:
    url = f"sqlite:///{(tmp_path / 'w.db').as_posix()}"
    ctx = LdapTestContext(tmp_path, {"w": url}, {"dir": reader(slapd),
                                                 "anonymous": {"url": slapd.url}})
    try:
        assert small(ctx, slapd, "people", delete="hard").output["inserted"] == 30
        # slapd hides the base from a bind without read rights (it may instead answer with
        # no entries: then the ratio stops the deletes, see the 60 % test)
        with pytest.raises(Fatal, match=r"bind as anonymous.*noSuchObject \(32\)"):
            small(ctx, slapd, "people", delete="hard", connection="anonymous")
    finally:
        ctx.close()
    assert rows(url, "SELECT COUNT(*) FROM people") == [(30,)]
