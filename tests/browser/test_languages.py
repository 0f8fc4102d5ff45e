"""The pages in French and Simplified Chinese, in Chromium (Playwright's ``locale`` sets
Accept-Language): every page an operator and an admin use shows the glossary's words, no
English label that the catalogue translates, and no button, heading or badge wider than
its box, at 1280 px and at a phone's width. The header's switch keeps a user's choice
after logout and login, on another browser too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from babel.messages.pofile import read_po

from cadenza.web.ui.render import LOCALE_DIR
from tests.browser.conftest import PASSWORD, UI, login, shot

LOCALES = {"fr": ("fr-FR", "fr"), "zh": ("zh-CN", "zh_Hans")}
PAGES = {  # path: words of the glossary the page shows, per language
    "/jobs": {"fr": ["Tâches", "Planification", "Exécuter maintenant"],
              "zh": ["任务", "计划", "立即运行"]},
    "/jobs/sales-load": {"fr": ["Étapes", "Préréglages", "Prochains déclenchements"],
                         "zh": ["步骤", "预设", "下次触发"]},
    "/jobs/sales-load/run": {"fr": ["Exécuter avec des paramètres", "Préréglage"],
                             "zh": ["带参数运行", "预设"]},
    "/jobs/sales-load/edit": {"fr": ["Modifier", "Fuseau horaire", "Étapes"],
                              "zh": ["编辑", "时区", "步骤"]},
    "RUN": {"fr": ["Exécution", "Journal", "Déclencheur", "réussie"],
            "zh": ["运行", "日志", "触发方式", "成功"]},
    "/runs": {"fr": ["Exécutions", "Déclencheur"], "zh": ["运行记录", "触发方式"]},
    "/resources": {"fr": ["Ressources", "Membre", "disponible"],
                   "zh": ["资源", "成员", "可用"]},
    "/audit": {"fr": ["Journal d'audit", "Auteur"], "zh": ["审计日志", "操作者"]},
    "/dashboard": {"fr": ["Tableau de bord"], "zh": ["仪表盘"]},
    "/admin": {"fr": ["Utilisateurs et rôles", "Jetons d'API"], "zh": ["用户与角色", "API 令牌"]},
}
SHOTS = {"/jobs": "jobs", "/jobs/sales-load": "job", "RUN": "run",
         "/resources": "resources", "/dashboard": "dashboard"}

LABELS_JS = """() => {
  const out = [];
  document.querySelectorAll('button, a, th, label, h1, h2, h3, .state, .tag, dt, summary,'
      + ' legend, option').forEach(el => {
    if (el.closest('code, pre, #log, .cm-editor, .CodeMirror')) return;
    const text = (el.innerText || el.textContent || '').trim();
    if (text) out.push(text);
  });
  return out;
}"""
OVERFLOW_JS = """() => {
  const out = [];
  document.querySelectorAll('button, .button, th, .state, .tag, .topbar nav a, h1, label,'
      + ' .usermenu > *').forEach(el => {
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return;
    if (el.offsetParent === null && style.position !== 'fixed') return;
    if (el.classList.contains('sr-only')) return;  // for screen readers, clipped on purpose
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0)
      out.push(el.tagName + '.' + el.className + ': ' + el.innerText.trim().slice(0, 40)
               + ' (' + el.scrollWidth + ' > ' + el.clientWidth + ')');
  });
  const page = document.documentElement;
  if (page.scrollWidth > window.innerWidth + 1)
    out.push('the page scrolls sideways: ' + page.scrollWidth + ' > ' + window.innerWidth);
  return out;
}"""


def translated_english(lang: str) -> set[str]:
    """The English messages the ``lang`` catalogue gives another text for."""
    with (LOCALE_DIR / lang / "LC_MESSAGES" / "messages.po").open("rb") as source:
        catalogue = read_po(source, locale=lang)
    out = set()
    for message in catalogue:
        if message.id and isinstance(message.id, str) and message.string \
                and message.string != message.id and "%(" not in message.id:
            out.add(message.id)
    return out


@pytest.fixture(scope="module")
def run_id(ui: UI) -> str:
    """A finished sales-load run, started through the API as the operator."""
    with httpx.Client(base_url=ui.base, timeout=30) as client:
        answer = client.post("/api/login", json={"username": "otto", "password": PASSWORD})
        client.headers.update({"X-CSRF-Token": answer.json()["csrf_token"], "Origin": ui.base})
        started = client.post("/api/jobs/sales-load/runs", json={})
        assert started.status_code == 201, started.text
        run = str(started.json()["run_id"])
        import time

        deadline = time.monotonic() + 60  # a real run in a real server: real time
        while time.monotonic() < deadline:
            if client.get(f"/api/runs/{run}").json()["state"] == "SUCCEEDED":
                return run
            time.sleep(0.3)
    raise AssertionError("the sales-load run did not succeed")


@pytest.fixture
def localized(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A page in a fresh context whose browser asks for ``request.param`` (fr or zh)."""
    tag, _ = LOCALES[request.param]
    width, height = getattr(request, "viewport", (1280, 900))
    context = browser.new_context(locale=tag, viewport={"width": width, "height": height})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.set_default_timeout(15_000)
    page.cadenza_lang = request.param
    try:
        yield page
    finally:
        context.close()
    assert not problems, problems


def _path(path: str, run: str) -> str:
    return f"/runs/{run}" if path == "RUN" else path


@pytest.mark.parametrize("localized", ["fr", "zh"], indirect=True)
def test_every_page_speaks_the_language(ui: UI, localized: Any, run_id: str,
                                        tmp_path: Path) -> None:
    page, lang = localized, localized.cadenza_lang
    english = translated_english(LOCALES[lang][1])
    login(page, ui, "ada")
    for path, words in PAGES.items():
        page.goto(f"{ui.base}{_path(path, run_id)}")
        page.wait_for_load_state("networkidle")
        text = page.locator("body").inner_text()
        for word in words[lang]:
            assert word in text, (lang, path, word)
        left = sorted({label for label in page.evaluate(LABELS_JS) if label in english})
        assert not left, (lang, path, f"English labels left: {left}")
        overflowing = page.evaluate(OVERFLOW_JS)
        assert not overflowing, (lang, path, overflowing)
        if path in SHOTS:
            shot(page, f"{lang}-{SHOTS[path]}", tmp_path)


@pytest.mark.parametrize("localized", ["fr", "zh"], indirect=True)
def test_a_phone_shows_the_pages_without_overflow(ui: UI, localized: Any, run_id: str,
                                                  tmp_path: Path) -> None:
    page, lang = localized, localized.cadenza_lang
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, ui, "otto")
    for path in ("/jobs", "/jobs/sales-load", "RUN", "/runs", "/resources"):
        page.goto(f"{ui.base}{_path(path, run_id)}")
        page.wait_for_load_state("networkidle")
        overflowing = page.evaluate(OVERFLOW_JS)
        assert not overflowing, (lang, path, overflowing)
        if path == "/jobs":
            shot(page, f"{lang}-jobs-phone", tmp_path)


def test_the_switch_keeps_french_after_logout_and_login(ui: UI, browser: Any) -> None:
    english = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 900})
    page = english.new_page()
    try:
        login(page, ui, "vera")
        assert page.locator(".topbar nav a", has_text="Jobs").count() == 1
        with page.expect_navigation():
            page.select_option("#langswitch", "fr")
        assert page.locator(".topbar nav a", has_text="Tâches").count() == 1
        page.click(".usermenu button")  # log out
        page.wait_for_url("**/login**")
        assert page.locator("button[type=submit]", has_text="Se connecter").count() == 1
    finally:
        english.close()
    elsewhere = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 900})
    page = elsewhere.new_page()
    try:  # another browser, English, no cookie: the user's own choice after login
        login(page, ui, "vera")
        assert page.locator("html").get_attribute("lang") == "fr"
        assert page.locator(".topbar nav a", has_text="Tâches").count() == 1
    finally:
        elsewhere.close()
