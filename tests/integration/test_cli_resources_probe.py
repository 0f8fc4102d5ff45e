"""``cadenza resources probe ID`` on a real home: a route through tinyproxy with basic
auth (its password a secret of the home), a real IP-echo server, and the fault proxy."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.proxies import (  # noqa: F401
    FR,
    EchoServer,
    FaultProxy,
    echo_fixture,
    fault_proxy_fixture,
    tinyproxy,
)
from typer.testing import CliRunner

from cadenza.cli.main import app
from cadenza.home import Home

PASSWORD = "Tiny-Proxy-Pw-77"


def make_home(tmp_path: Path, echo: EchoServer, members: str) -> Path:
    home = tmp_path / "home"
    runner = CliRunner()
    assert runner.invoke(app, ["init", str(home)]).exit_code == 0
    result = runner.invoke(app, ["--home", str(home), "secrets", "set", "proxy_pw",
                                 "--value-stdin"], input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    config = home / "cadenza.toml"
    config.write_text(config.read_text() + f'''
[pools.egress]
kind = "route"
cooldown = "30s"
[pools.egress.health]
timeout = "2s"
probe_url = "{echo.url('/generate_204')}"
ip_echo_url = "{echo.url('/ip')}"
{members}''')
    loaded = Home(home).load_config()
    with Home(home).open_store(loaded) as store:  # what the pools sync does at start
        for name, pool in loaded.settings.pools.items():
            for member in pool.members:
                store.upsert_resource(member.id, name, pool.kind)
    return home


def test_probe_prints_phases_and_records(tmp_path: Path, echo: EchoServer,
                                         fault_proxy: FaultProxy) -> None:
    with tinyproxy(tmp_path / "tp", source=FR, credentials=("cz", PASSWORD)) as tp:
        members = (f'[[pools.egress.members]]\nid = "fr-1"\nregion = "FR"\n'
                   f'proxy = "http://cz:${{secret.proxy_pw}}@127.0.0.1:{tp.port}"\n'
                   f'[[pools.egress.members]]\nid = "fr-2"\nregion = "FR"\n'
                   f'proxy = "{fault_proxy.url}"\n')
        home = make_home(tmp_path, echo, members)
        runner = CliRunner()
        ok = runner.invoke(app, ["--home", str(home), "resources", "probe", "fr-1"])
        as_json = runner.invoke(app, ["--home", str(home), "resources", "probe", "fr-1",
                                      "--json"])
        fault_proxy.refuse()
        bad = runner.invoke(app, ["--home", str(home), "resources", "probe", "fr-2"])
        missing = runner.invoke(app, ["--home", str(home), "resources", "probe", "nope"])
        events = runner.invoke(app, ["--home", str(home), "events", "--json"])
    assert ok.exit_code == 0, ok.output
    assert "route fr-1: passed in" in ok.output and f"egress {FR} FR" in ok.output
    assert "score " in ok.output and "; AVAILABLE" in ok.output
    data = json.loads(as_json.output)
    assert (data["ok"], data["egress_region"], data["after"]) == (True, "FR", "AVAILABLE")
    assert bad.exit_code == 1
    assert "failed at phase 1 (connect)" in bad.output
    assert missing.exit_code == 1 and "no resource 'nope'" in missing.output
    for text in (ok.output, as_json.output, bad.output, events.output):
        assert PASSWORD not in text
    with Home(home).open_store(Home(home).load_settings()) as store:
        checks = store.list_events(resource_id="fr-1", event_type="HEALTH_CHECKED")
        assert len(checks) == 2 and checks[0].actor.startswith("cli:")
        assert PASSWORD not in " ".join(f"{e.message} {e.payload}"
                                        for e in store.list_events(limit=10_000))
