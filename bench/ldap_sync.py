"""Benchmark: ldap_sync of 5,000 people from a real slapd into a SQLite table, through the
executor (not a test).

Starts the slapd of ``tests/support/slapd.py`` (Debian package; 5,000 people in
``ou=sync`` with unicode, multi-valued and binary attributes), writes a home whose job syncs
them (StartTLS with the generated CA, ``delete = "soft"``), and times three runs: the first
sync (5,000 inserts), a sync with nothing changed, and a sync after 10 entries changed and
5 removed. Prints seconds and entries per second for each.

Usage::

    python bench/ldap_sync.py [--page-size 500] [--batch-size 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.slapd

from tests.support.slapd import READER_DN, READER_PW, SUFFIX, dn_of, start

from cadenza.clock import SystemClock
from cadenza.executor.request import RunRequest
from cadenza.executor.runner import Executor
from cadenza.home import Home
from cadenza.steps.builtin.lib.ldapsearch import ldap3

JOBS = """
[jobs.people]
[[jobs.people.steps]]
name = "sync"
type = "ldap_sync"
connection = "directory"
base = "ou=sync,{suffix}"
filter = "(objectClass=inetOrgPerson)"
target = {{ connection = "wh", table = "people", key = "uid" }}
delete = "soft"
page_size = {page_size}
batch_size = {batch_size}
[jobs.people.steps.mapping]
uid = "uid"
cn = "name"
mail = "mail"
telephoneNumber = "phones"
jpegPhoto = "photo"
dn = "dn"
"""

SETTINGS = """
[connections.wh]
type = "sql"
url = "sqlite:///data/wh.db"

[connections.directory]
type = "ldap"
url = "ldap://localhost:{port}"
start_tls = true
ca_file = "{ca}"
bind_dn = "{reader}"
password = "${{secret.ldap_reader}}"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cadenza-bench-ldap-"))
    server = start(work / "slapd")
    clock = SystemClock()
    try:
        root = work / "home"
        for sub in ("data", "plugins"):
            (root / sub).mkdir(parents=True)
        (root / "cadenza.toml").write_text(SETTINGS.format(
            port=server.port, ca=server.ca_file.as_posix(), reader=READER_DN), encoding="utf-8")
        (root / "jobs.toml").write_text(JOBS.format(
            suffix=SUFFIX, page_size=args.page_size, batch_size=args.batch_size),
            encoding="utf-8")
        home = Home(root)
        home.secrets.set("ldap_reader", READER_PW)
        config = home.load_config()
        store = home.open_store(config)
        executor = Executor(store, config)
        try:
            for label in ("first sync", "nothing changed", "10 changed, 5 removed"):
                if label.startswith("10"):
                    admin = server.admin()
                    for n in range(10):
                        admin.modify(dn_of("sync", f"sync-{100 + n:05d}"),
                                     {"cn": [(ldap3.MODIFY_REPLACE, [f"Changed {n}"])]})
                    for n in range(5):
                        admin.delete(dn_of("sync", f"sync-{200 + n:05d}"))
                    admin.unbind()
                started = clock.monotonic()
                run_id = executor.enqueue("people", RunRequest(), trigger="manual:bench")
                outcome = executor.execute(run_id)
                seconds = clock.monotonic() - started
                [step] = store.list_step_runs(run_id)
                out = step.output
                print(f"{label:24} {outcome.state:10} {seconds:6.2f} s  "
                      f"{out['fetched'] / seconds:7.0f} entries/s  inserted {out['inserted']} "
                      f"updated {out['updated']} deleted {out['deleted']}")
        finally:
            executor.close()
            store.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
