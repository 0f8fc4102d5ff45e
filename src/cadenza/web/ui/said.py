"""The service layer's messages in the page's language.

The services, the configuration's checks and the domain speak English: the CLI, the API and
the logs print their messages as they are. A page shows them in its reader's language
through :func:`say`: each message the pages meet is written here once as a template with
named fields (``missing required key {key}``), extracted into the catalogue like any other
string; a message that matches a template is said with the template's translation, its
fields (the key, the value typed, the job's id) kept as they were written, or said in turn
when a field is itself a message (``got {value}`` where the value is ``string 'x'``). A
message that matches no template is shown in English: a page never hides a problem for want
of a translation (docs/ui.md "Languages and translations" names the messages covered).
"""

from __future__ import annotations

import re
from functools import cache, partial

from cadenza.web.ui.render import N_, translations

TEMPLATES: tuple[str, ...] = (
    # values, as the configuration's checks describe what they got
    N_("string {text}"), N_("integer {number}"), N_("number {number}"),
    N_("boolean {value}"), N_("a table"), N_("an array"), N_("a long string"),
    # the TOML text itself
    N_("duplicate key: this key is already set in this table"),
    N_("unterminated string: expected a closing quote on this line"),
    N_("unterminated string: expected its closing quotes"),
    N_("invalid statement: expected `key = value`, a [table] header or a # comment"),
    N_("unclosed array: expected ',' or ']'"),
    N_("unclosed inline table: expected ',' or '}' on the same line"),
    N_("invalid value: expected a string, number, boolean, date, array or inline table"),
    N_("duplicate table [{name}]: a table may be declared only once (merge the two)"),
    N_("duplicate table [{name}]; it is already declared at line {line}: a table may be "
       "declared only once (merge the two)"),
    # the shape of a table
    N_("missing required key {key}"),
    N_("missing required key 'type': expected one of {types}"),
    N_("unknown key {key}"),
    N_("unknown key {key}; allowed keys: {keys}"),
    N_("unknown key {key} (did you mean {close}?); allowed keys: {keys}"),
    N_("unknown type {type}: expected one of {types}"),
    N_("unknown step type {type}: expected one of {types}"),
    N_("expected a table with at least name and type"),
    N_("a job needs at least one step: expected one [[jobs.ID.steps]] with name and type"),
    N_("a job needs at least one step: expected an array of tables [[jobs.ID.steps]] with "
       "name and type"),
    N_("duplicate step name {name}: steps[{index}] has it; step names are unique in a job"),
    # values of the wrong type or out of bounds
    N_("expected an integer, got {value}"), N_("expected a number, got {value}"),
    N_("expected a finite number (not nan or inf), got {value}"),
    N_("expected true or false, got {value}"), N_("expected a string, got {value}"),
    N_("expected an array, got {value}"), N_("expected a table, got {value}"),
    N_("expected a number >= {bound}, got {value}"),
    N_("expected a number > {bound}, got {value}"),
    N_("expected a number <= {bound}, got {value}"),
    N_("expected a number < {bound}, got {value}"),
    N_("expected {choices}, got {value}"),
    N_("expected at least {count} character(s), got {value}"),
    N_("expected at least {count} item(s), got {value}"),
    N_("expected at most {count} item(s) or characters"),
    N_("expected a non-empty string"),
    N_("expected a non-empty file path"),
    # identifiers, durations, zones, schedules, windows, addresses
    N_("expected 1 to 64 characters from A-Z a-z 0-9 _ -, got {value}"),
    N_("invalid job id {id}: expected 1 to 64 characters from A-Z a-z 0-9 _ -"),
    N_('expected a duration like "30s", "90m", "2h", "1d" or "1h30m", got {value}'),
    N_('expected a duration like "30s", "90m", "2h", "1d" or "1h30m", at most 3650d, '
       'got {value}'),
    N_("unknown time zone {zone}: expected an IANA name like 'Europe/Paris' or 'UTC'"),
    N_("unknown time zone {zone}: expected an IANA name from the zone database like "
       "'Europe/Paris' or 'UTC'"),
    N_("unknown time zone {zone}: expected an IANA name from the zone database like "
       "'Europe/Paris' or 'UTC'; did you mean {close}?"),
    N_("invalid schedule {schedule}: {problem}"),
    N_("{field}: {token} is not a number"),
    N_("{field}: {token} is not a number (0-6 with 0 = Monday, or mon..sun)"),
    N_("{field}: {token} is not a number (1-12 or jan..dec)"),
    N_("{field}: {value} is out of range {low}-{high}"),
    N_("{field}: 7 is not a day: days count 0 = Monday to 6 = Sunday"),
    N_("{field}: empty field"),
    N_("{field}: range {range} goes backwards"),
    N_("empty schedule; expected 5 fields or an alias like @daily"),
    N_("unknown alias {alias}; expected one of {aliases}"),
    N_("expected 5 fields (minute hour day-of-month month day-of-week), got {count}"),
    N_("day-of-month: no chosen month has any of these days: the schedule never fires"),
    N_('expected a window like "mon-fri 08:00-18:00" or "22:00-06:00", got {value}'),
    N_("window {window} is empty: start and end are the same time"),
    N_('expected a window like "mon-fri 08:00-18:00" or "22:00-06:00": unknown day {day} '
       "(days are mon, tue, wed, thu, fri, sat, sun)"),
    N_('expected a window like "mon-fri 08:00-18:00" or "22:00-06:00": {time} is not a '
       "time of day (00:00-23:59) in {value}"),
    N_("expected an e-mail address like 'cadenza@example.org', got {value}: {problem}"),
    N_("expected an e-mail address, role:NAME, user:NAME or channel:NAME, got {value}"),
    N_("expected a path without '..' segments (paths stay inside [files].roots), "
       "got {value}"),
    N_("expected a URL like {example} ({schemes}), got {value}"),
    # parameters, tokens and references between jobs
    N_("parameter {name}: expected {expected}, got {value}"),
    N_("a string"), N_("an integer"), N_("a number"), N_("true or false"),
    N_("a date (YYYY-MM-DD)"), N_("a date and time (YYYY-MM-DDTHH:MM:SS)"),
    N_("a list (JSON, like [1, 2])"), N_('a table (JSON, like {"key": 1})'),
    N_("{token}: unknown token; expected one of {known}"),
    N_("{token}: no parameter {name}"),
    N_("{token}: a step cannot read its own output; expected an earlier step"),
    N_("{token}: step {step} runs after this one; expected an earlier step (earlier: "
       "{earlier})"),
    N_("{token}: no step {step} in this job; expected an earlier step (earlier: {earlier})"),
    N_("unknown connection {name}: expected a connection defined in cadenza.toml "
       "([connections.{id}]); defined connections: {known}"),
    N_("unknown connection {name}: expected a connection of type {type} defined in "
       "cadenza.toml ([connections.{id}]); {kind} connections: {known}"),
    N_("connection {name} is of type {type}; expected a connection of type {wanted}"),
    N_("{token}: no output of an earlier step {step}"),
    N_("parameter {name} is not declared in the job's params (declared: {declared})"),
    N_("parameter {name} is not declared in job {job}'s params (declared: {declared})"),
    N_("job {job} has no preset {preset} (presets: {presets})"),
    N_("parameter name {name} refused: dunder names (__x__) are reserved"),
    N_("environment variable {name} is not set (referenced as {token})"),
    N_("secret {name} is not set: set it with `cadenza secrets set {name}`"),
    N_("no channel to send through: expected channel = NAME, and a [channels.NAME] in "
       "cadenza.toml"),
    N_("alerts have recipients but cadenza.toml defines no channel to send them through"),
    N_("pool {pool} has {members} member(s); {count} can never be leased at once"),
    N_("module {module} is neither in plugins/ nor installed; the step will fail when it runs"),
    N_("no job {pattern} in jobs.toml"),
    N_("no job has the tag {tag}"),
    N_("step {step}: {problem}"),
    # the editor, the pages' forms and the session
    N_("the TOML does not parse: {problem}"),
    N_("the text must define the one table [jobs.{id}] (and its sub-tables), found: {found}"),
    N_("job {id} exists; edit it instead"),
    N_("no job {id} in jobs.toml"),
    N_("no job {id} in jobs.toml; known jobs: {jobs}"),
    N_("no job {id}; known jobs: {jobs}"),
    N_("no run {id}"),
    N_("type the run id {id} to abandon it"),
    N_("type the job's id ({id}) to delete it"),
    N_("missing base_hash: reload the page and edit again"),
    N_("missing base_hash: reload the page and delete again"),
    N_("expected a step uid of letters and digits"),
    N_("expected TOML lines like key = \"value\": {problem}"),
    N_("enabled: expected true or false"),
    N_("preset_name: give the preset a name"),
    N_("{name} {value}: expected an age like 90s, 30m, 1h, 2d or an ISO time"),
    N_("run {id} is {state}: only a NEEDS_REVIEW run can be {verb} (see `cadenza runs "
       "show RUN`)"),
    N_("you cannot {action}: ask another admin"),
    N_("too many failed logins; try again in {seconds} seconds"),
    N_("the password must have at least {count} characters"),
    N_("the current password does not match"),
    N_("the two new passwords differ"),
    N_("give at least one role"),
    N_("no user {name}"),
    # the desktop window's one-time ticket
    N_("a desktop ticket is accepted from this computer only"),
    N_("this desktop ticket is unknown, used or expired; run `cadenza desktop` again"),
    N_("user {name} does not exist or is disabled"),
)
"""Every message template the pages say in their reader's language."""

_FIELD = re.compile(r"\{([a-z_]+)\}")
_SHAPES = {"field": r"[a-z-]+", "token": r"\$\{[^{}]*\}", "count": r"-?[0-9.]+",
           "number": r"\S+", "bound": r"\S+", "line": r"[0-9]+", "low": r"[0-9]+",
           "high": r"[0-9]+", "seconds": r"[0-9]+", "members": r"[0-9]+", "index": r"[0-9]+"}
"""What a field of this name can hold (any text for the others): a cron field's name is a
word, so ``step 'x': minute: 61 is out of range`` is a step's problem, not a field's."""


def _pattern(template: str) -> re.Pattern[str]:
    """``template`` as a regular expression: its text literally, each field any text (a
    field named twice matches the same text twice)."""
    out, seen, last = [], set(), 0
    for found in _FIELD.finditer(template):
        out.append(re.escape(template[last:found.start()]))
        name = found.group(1)
        shape = _SHAPES.get(name, ".+?")
        out.append(f"(?P={name})" if name in seen else f"(?P<{name}>{shape})")
        seen.add(name)
        last = found.end()
    out.append(re.escape(template[last:]))
    return re.compile("".join(out), re.DOTALL)


@cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """The templates with fields, the most literal text first (the most specific wins)."""
    with_fields = [t for t in TEMPLATES if _FIELD.search(t)]
    with_fields.sort(key=lambda t: -len(_FIELD.sub("", t)))
    return tuple((t, _pattern(t)) for t in with_fields)


def _field_value(fields: dict[str, str], found: re.Match[str]) -> str:
    return fields.get(found.group(1), found.group(0))


def say(lang: str, message: str, *, _depth: int = 0) -> str:
    """``message`` in ``lang``: the catalogue's translation of the message itself or of the
    template it matches, with the template's fields put back; else ``message`` unchanged."""
    if lang == "en" or not message:
        return message
    catalogue = translations(lang)
    exact = catalogue.gettext(message)
    if exact != message:
        return exact
    if _depth > 3:
        return message
    for template, pattern in _patterns():
        found = pattern.fullmatch(message)
        if found is None:
            continue
        said = catalogue.gettext(template)
        if said == template:
            return message
        fields = {name: say(lang, value, _depth=_depth + 1)
                  for name, value in found.groupdict().items()}
        return _FIELD.sub(partial(_field_value, fields), said)
    return message
