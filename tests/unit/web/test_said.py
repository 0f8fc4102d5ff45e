"""The services' messages said in the page's language (cadenza.web.ui.said)."""

from __future__ import annotations

import re

import pytest

from cadenza.web.ui.render import translations
from cadenza.web.ui.said import TEMPLATES, say

FIELD = re.compile(r"\{([a-z_]+)\}")


@pytest.mark.parametrize("lang", ["fr", "zh_Hans"])
def test_every_template_is_translated_with_the_same_fields(lang: str) -> None:
    catalogue = translations(lang)
    for template in TEMPLATES:
        said = catalogue.gettext(template)
        assert said != template, f"{lang}: {template!r} is not translated"
        assert sorted(set(FIELD.findall(said))) == sorted(set(FIELD.findall(template))), \
            (template, said)


def test_a_message_is_said_with_its_values_kept() -> None:
    message = "unknown key 'schedul' (did you mean 'schedule'?); allowed keys: schedule, steps"
    assert say("fr", message) == ("clé inconnue 'schedul' (vouliez-vous dire 'schedule' ?) ; "
                                  "clés permises : schedule, steps")
    assert say("zh_Hans", message) == ("未知的键 'schedul'（是否想写 'schedule'？）；"
                                       "允许的键：schedule, steps")
    assert say("en", message) == message


def test_a_field_that_is_a_message_is_said_too() -> None:
    message = "expected a number >= 1, got integer 0"
    assert say("fr", message) == "attendu un nombre >= 1, reçu entier 0"
    assert say("zh_Hans", message) == "应为不小于 1 的数字，实际为 整数 0"
    nested = "step 'load': invalid schedule '61 * * * *': minute: 61 is out of range 0-59"
    assert say("fr", nested) == ("étape 'load' : planification invalide '61 * * * *' : "
                                 "minute : 61 est hors de la plage 0-59")


def test_a_message_with_no_template_stays_as_it_is() -> None:
    assert say("fr", "the flux capacitor is out of range") == \
        "the flux capacitor is out of range"
    assert say("zh_Hans", "") == ""


def test_a_plain_message_of_the_catalogue_is_said_as_is() -> None:
    assert say("fr", "the two new passwords differ") == \
        "les deux nouveaux mots de passe diffèrent"
