"""Choosing the pages' language: the browser's Accept-Language, the header's switch (a
cookie before login, the user's own setting after), ``[server] language``; French and
Simplified Chinese pages; the catalogues complete."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from tests.integration.web.api_env import ORIGIN, PASSWORD, ApiEnv, api_env

from cadenza.web.ui.render import LANG_COOKIE, LOCALE_DIR, browser_language

HX = {"HX-Request": "true"}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as made:
        yield made


@pytest.mark.parametrize(("header", "chosen"), [
    ("fr-FR,fr;q=0.9,en;q=0.8", "fr"), ("zh-CN,zh;q=0.9", "zh_Hans"), ("zh", "zh_Hans"),
    ("zh-Hans-SG", "zh_Hans"), ("zh-TW", "zh_Hans"), ("de-DE,fr;q=0.5", "fr"),
    ("en-US,fr;q=0.9", "en"), ("fr;q=0.2,zh-CN;q=0.8", "zh_Hans"), ("de", None), ("", None),
    ("fr;q=abc", None), (";;,,=", None), ("fr;q=0", None),
])
def test_accept_language(header: str, chosen: str | None) -> None:
    assert browser_language(header) == chosen


def test_pages_follow_the_browser(env: ApiEnv) -> None:
    page = env.client.get("/login", headers={"Accept-Language": "fr-FR,fr;q=0.9"}).text
    assert '<html lang="fr" ' in page and "Se connecter" in page
    page = env.client.get("/login", headers={"Accept-Language": "zh-CN"}).text
    assert '<html lang="zh-Hans" ' in page and "登录" in page and "Log in" not in page
    page = env.client.get("/login", headers={"Accept-Language": "de"}).text
    assert '<html lang="en" ' in page and "Log in" in page


def test_the_switch_before_login_sets_a_cookie_that_beats_the_browser(env: ApiEnv) -> None:
    env.client.cookies.clear()
    answer = env.client.post("/language", data={"lang": "fr"},
                             headers={"Origin": ORIGIN, **HX})
    assert answer.status_code == 204 and answer.headers["HX-Refresh"] == "true"
    assert env.client.cookies.get(LANG_COOKIE) == "fr"
    page = env.client.get("/login", headers={"Accept-Language": "zh-CN"}).text
    assert "Se connecter" in page
    bad = env.client.post("/language", data={"lang": "klingon"}, headers={"Origin": ORIGIN})
    assert bad.status_code == 422
    foreign = env.client.post("/language", data={"lang": "fr"},
                              headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403


def test_a_bad_cookie_falls_back_without_error(env: ApiEnv) -> None:
    env.client.cookies.set(LANG_COOKIE, "<script>")
    page = env.client.get("/login", headers={"Accept-Language": "fr"})
    assert page.status_code == 200 and "Se connecter" in page.text


def test_a_user_who_picks_french_keeps_it_after_logout_and_login(env: ApiEnv) -> None:
    client = env.session("operator")
    client.headers["Accept-Language"] = "en-US"
    assert ">Jobs<" in client.get("/jobs").text
    without_csrf = client.post("/language", data={"lang": "fr"},
                               headers={"X-CSRF-Token": "wrong", **HX})
    assert without_csrf.status_code == 403
    assert client.post("/language", data={"lang": "fr"}, headers=HX).status_code == 204
    assert env.store.get_user("operator").language == "fr"
    page = client.get("/jobs").text
    assert ">Tâches<" in page and 'lang="fr"' in page
    assert client.post("/logout", headers=HX).status_code == 200
    # a new browser (no cookie), English: the user's own setting wins after login
    from fastapi.testclient import TestClient

    fresh = TestClient(env.client.app, base_url=ORIGIN)
    answer = fresh.post("/api/login", json={"username": "operator", "password": PASSWORD})
    assert answer.status_code == 200
    assert LANG_COOKIE not in fresh.cookies
    page = fresh.get("/jobs", headers={"Accept-Language": "en-US"}).text
    assert ">Tâches<" in page and "Exécuter maintenant" in page


def test_server_language_is_the_default(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from cadenza.web.app import create_app

    with api_env(tmp_path) as env:
        app = create_app(env.store, home=env.services.home, language="zh_Hans")
        with TestClient(app, base_url=ORIGIN) as client:
            page = client.get("/login", headers={"Accept-Language": "en-US"}).text
            assert "登录" in page
            client.cookies.set(LANG_COOKIE, "fr")
            assert "Se connecter" in client.get("/login").text


@pytest.mark.parametrize("lang", ["fr", "zh_Hans"])
def test_catalogues_are_complete(lang: str) -> None:
    """Every message translated, none fuzzy, none obsolete, and the same messages as the
    template (run `make i18n` after adding a string, then translate it)."""
    with (LOCALE_DIR / "messages.pot").open("rb") as source:
        template = {(m.context, str(m.id)) for m in read_po(source) if m.id}
    with (LOCALE_DIR / lang / "LC_MESSAGES" / "messages.po").open("rb") as source:
        catalogue = read_po(source, locale=lang)
    ids = {(m.context, str(m.id)) for m in catalogue if m.id}
    empty = [m.id for m in catalogue if m.id and not (
        all(m.string) if isinstance(m.string, tuple) else m.string)]
    fuzzy = [m.id for m in catalogue if m.id and m.fuzzy]
    assert not empty, f"{len(empty)} untranslated in {lang}: {empty[:10]}"
    assert not fuzzy, f"{len(fuzzy)} fuzzy in {lang}: {fuzzy[:10]}"
    assert not catalogue.obsolete, f"obsolete in {lang}: {list(catalogue.obsolete)[:10]}"
    assert ids == template, (f"{lang} differs from messages.pot (run `make i18n`): "
                             f"missing {sorted(template - ids)[:10]}, extra "
                             f"{sorted(ids - template)[:10]}")


@pytest.mark.parametrize("lang", ["fr", "zh_Hans"])
def test_translations_keep_their_placeholders(lang: str) -> None:
    import re

    with (LOCALE_DIR / lang / "LC_MESSAGES" / "messages.po").open("rb") as source:
        catalogue = read_po(source, locale=lang)
    field = re.compile(r"%\(\w+\)[sd]")
    for message in catalogue:
        if not message.id:
            continue
        ids = message.id if isinstance(message.id, tuple) else (message.id,)
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        wanted = set(field.findall(ids[-1]))
        for string in strings:
            assert set(field.findall(string)) == wanted, (message.id, string)


def test_the_account_page_sets_language_and_zone(env: ApiEnv) -> None:
    client = env.session("viewer")
    page = client.get("/account")
    assert page.status_code == 200 and 'id="pref-language"' in page.text
    saved = client.post("/account/preferences",
                        data={"language": "zh_Hans", "timezone": "Asia/Shanghai"}, headers=HX)
    assert saved.status_code == 204, saved.text
    user = env.store.get_user("viewer")
    assert (user.language, user.timezone) == ("zh_Hans", "Asia/Shanghai")
    assert "语言" in client.get("/account").text
    bad = client.post("/account/preferences", data={"language": "fr", "timezone": "Mars/Base"},
                      headers=HX)
    assert bad.status_code == 422 and "Mars/Base" in bad.text
    assert "未知的时区 &#39;Mars/Base&#39;" in bad.text, bad.text  # said in the reader's language
    assert env.store.get_user("viewer").language == "zh_Hans"  # nothing half-saved
    cleared = client.post("/account/preferences", data={"language": "", "timezone": ""},
                          headers=HX)
    assert cleared.status_code == 204
    assert env.store.get_user("viewer").language is None


def test_cli_users_set(env: ApiEnv) -> None:
    from typer.testing import CliRunner

    from cadenza.cli.main import app

    home = str(env.services.home.path)
    cli = CliRunner()
    done = cli.invoke(app, ["--home", home, "users", "set", "operator", "--language", "fr",
                            "--timezone", "Europe/Paris"])
    assert done.exit_code == 0, done.output
    assert env.store.get_user("operator").language == "fr"
    bad = cli.invoke(app, ["--home", home, "users", "set", "operator", "--language", "de"])
    assert bad.exit_code == 2 and "unknown language 'de'" in bad.output
    zone = cli.invoke(app, ["--home", home, "users", "set", "operator", "--timezone",
                            "Europe/Pari"])
    assert zone.exit_code == 2 and "did you mean 'Europe/Paris'" in zone.output
    listed = cli.invoke(app, ["--home", home, "users", "list", "--json"])
    assert '"language": "fr"' in listed.output


def test_schedules_in_words_follow_the_page(env: ApiEnv) -> None:
    client = env.session("viewer")
    client.headers["Accept-Language"] = "fr"
    page = client.get("/jobs").text
    assert "tous les jours à 02:00, Europe/Paris" in page, page
    client.headers["Accept-Language"] = "zh-CN"
    assert "每天 02:00（Europe/Paris）" in client.get("/jobs/sales-load").text
    client.headers["Accept-Language"] = "en"
    assert "every day at 02:00, Europe/Paris" in client.get("/jobs").text


def test_days_of_the_week_in_the_page_language() -> None:
    from datetime import datetime

    from cadenza.web.ui.render import weekday

    sunday = datetime(2026, 12, 6)
    assert [weekday(lang, sunday) for lang in ("en", "fr", "zh_Hans")] == ["Sun", "dim.", "周日"]
