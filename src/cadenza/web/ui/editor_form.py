"""The job editor's form, generated from JSON schemas (:mod:`cadenza.services.job_drafts`):
no field is written by hand, so a step type added by a plugin gets its form for free.

Each schema property becomes a :class:`Field` of one kind: ``text``/``textarea`` (strings),
``duration`` (``"90m"``),
``integer``/``number``, ``bool`` (a choice of default / true / false, so an unset key stays
unset), ``enum`` (a select), ``list`` (strings, one per line), ``table`` (a map, written as
TOML ``key = value`` lines), ``value`` (anything else: a TOML value, or plain text taken as
a string) and ``group`` (a nested model: a fieldset of its own fields). A field's label
and help are its schema's ``title`` and ``description`` (set on the config models,
:mod:`cadenza.config.labels`); required fields come first; ``x-advanced`` fields are
folded under "More options" by the page. Keys that the
schema does not know (a typo, a key of another step type) are kept in an ``other`` field
as TOML lines, where validation names them: a save never drops what it does not know.

Input names carry the key path: ``job.retry.attempts``, ``step.<uid>.query`` (a step's
``uid`` is stable while steps are added, removed and reordered in the page; their order in
the form is the order of the ``step_uid`` inputs). An empty input means "not written": the
table read back holds only what the person filled in, so an edit changes only what it
changed and keeps the rest of jobs.toml (and its comments) as it was.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cadenza.config.labels import human_title

_MULTILINE = frozenset({"query", "body", "template"})
OTHER = "__other"
"""The key of the field holding a table's keys that its schema does not know."""


@dataclass
class Field:
    """One input of the form (or a fieldset of them, ``kind == "group"``)."""

    key: str
    name: str
    path: str
    label: str
    kind: str
    required: bool = False
    default: str = ""
    options: tuple[str, ...] = ()
    help: str = ""
    ref: str = ""
    secret: bool = False
    advanced: bool = False
    value: str = ""
    children: list[Field] = field(default_factory=list)

    @property
    def shows_key(self) -> bool:
        """Whether the TOML key is worth showing beside the label (not when the label
        is just the key's words: never the key twice)."""
        return self.label.lower() != self.key.replace("_", " ").lower()

    @property
    def slot(self) -> str:
        """The id of the element holding this field's problems."""
        return slot_id(self.name)

    @property
    def input_id(self) -> str:
        """The id of the input (labels point at it)."""
        return "in-" + slot_id(self.name)[4:]


def slot_id(name: str) -> str:
    """``err-`` and ``name`` with every character outside ``[A-Za-z0-9-]`` encoded, an id
    that a CSS selector takes as is (htmx finds out-of-band targets with one)."""
    return "err-" + "".join(c if (c.isalnum() and c.isascii()) or c == "-"
                            else f"_{ord(c):x}_" for c in name)


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``prop`` with ``$ref`` followed and ``anyOf [X, null]`` reduced to X; and whether
    null was allowed."""
    out = dict(prop)
    nullable = False
    if "anyOf" in out:
        options = [o for o in out["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(out["anyOf"])
        if len(options) == 1:
            out.pop("anyOf")
            inner, _ = _resolve(options[0], defs)
            out = {**inner, **out}
    if "$ref" in out:
        target = defs.get(str(out.pop("$ref")).rsplit("/", 1)[-1], {})
        out = {**target, **out}
    return out, nullable


def _kind(key: str, prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    kind = prop.get("type")
    if prop.get("x-kind") == "duration":
        return "duration"
    if "properties" in prop:
        return "group"
    if "enum" in prop:
        return "enum"
    if kind == "object":
        return "table"
    if kind == "array":
        items, _ = _resolve(prop.get("items", {}), defs)
        return "list" if items.get("type") == "string" else "value"
    if kind == "string":
        return "textarea" if key in _MULTILINE else "text"
    if kind in ("integer", "number"):
        return str(kind)
    if kind == "boolean":
        return "bool"
    return "value"


def _default_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return toml_value(value)


def build(schema: Mapping[str, Any], values: Mapping[str, Any], *, name: str, path: str,
          skip: tuple[str, ...] = (), defs: Mapping[str, Any] | None = None,
          posted_other: bool = False) -> list[Field]:
    """The fields of ``schema``'s properties (but ``skip``), holding ``values``; plus an
    ``other`` field for the keys it does not know (or ``posted_other``: the form has one)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    required = set(schema.get("required", ()))
    out: list[Field] = []
    for key, raw in schema.get("properties", {}).items():
        if key in skip:
            continue
        prop, _ = _resolve(raw, defs)
        kind = _kind(key, prop, defs)
        sub_name, sub_path = f"{name}.{key}", f"{path}.{key}" if path else key
        # The field's own title and description, never those of the model it refers to
        # (a model's title is its class name, its description a docstring for developers).
        title = raw.get("title") or (prop.get("title") if "$ref" not in raw
                                     and kind != "group" else None) or human_title(key)
        made = Field(key=key, name=sub_name, path=sub_path, label=str(title), kind=kind,
                     required=key in required, default=_default_text(prop.get("default")),
                     options=tuple(str(o) for o in prop.get("enum", ())),
                     help=" ".join(str(raw.get("description") or "").split("\n\n")[0]
                                   .replace("``", "").split()),
                     ref=str(raw.get("x-ref") or prop.get("x-ref") or ""),
                     secret=bool(raw.get("x-secret")),
                     advanced=bool(raw.get("x-advanced") or prop.get("x-advanced")))
        current = values.get(key)
        if kind == "group":
            made.children = build(prop, current if isinstance(current, Mapping) else {},
                                  name=sub_name, path=sub_path, defs=defs)
        elif key in values:
            made.kind, made.value = _shown(kind, current)
        out.append(made)
    out.sort(key=lambda f: not f.required)  # what must be filled in first, else as declared
    known = set(schema.get("properties", {})) | set(skip)
    other = {k: v for k, v in values.items() if k not in known}
    if other or posted_other:  # keys the schema does not know: shown, never dropped
        out.append(Field(key=OTHER, name=f"{name}.{OTHER}", path=path, kind="other",
                         label="Other keys", value=table_lines(other) if other else ""))
    return out


def _shown(kind: str, value: Any) -> tuple[str, str]:
    """How ``value`` is shown in a field of ``kind`` (a value that does not fit the kind
    is shown as a TOML value, so it is never lost)."""
    if kind in ("text", "textarea", "enum", "duration") and isinstance(value, str):
        return ("textarea" if "\n" in value else kind), value
    if kind in ("integer", "number") and isinstance(value, int | float) \
            and not isinstance(value, bool):
        return kind, str(value)
    if kind == "bool" and isinstance(value, bool):
        return kind, "true" if value else "false"
    if kind == "list" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return kind, "\n".join(value)
    if kind == "table" and isinstance(value, Mapping):
        return kind, table_lines(value)
    return "value", value_text(value)


def toml_value(value: Any) -> str:
    """``value`` as an inline TOML value (maps as ``{ k = v }``, on one line)."""
    import tomlkit

    def inline(item: Any) -> Any:
        if isinstance(item, Mapping):
            table = tomlkit.inline_table()
            table.update({k: inline(v) for k, v in item.items()})
            return table
        if isinstance(item, list):
            array = tomlkit.array()
            array.extend(inline(v) for v in item)
            return array
        return item

    return str(tomlkit.item(inline(value)).as_string())


def value_text(value: Any) -> str:
    """A ``value`` field's text: a string as itself when it reads back as that string,
    anything else as TOML."""
    if isinstance(value, str) and "\n" not in value and parse_value(value) == value:
        return value
    return toml_value(value)


def table_lines(value: Mapping[str, Any]) -> str:
    """A map as TOML ``key = value`` lines."""
    import tomlkit

    return str(tomlkit.dumps(dict(value))).strip()


def parse_value(text: str) -> Any:
    """A ``value`` field's value: ``text`` read as a TOML value, else as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def walk(fields: list[Field]) -> Iterator[Field]:
    """Every field, groups and their children."""
    for item in fields:
        yield item
        yield from walk(item.children)


def read(fields: list[Field], form: Mapping[str, str],
         errors: dict[str, str]) -> dict[str, Any]:
    """The table the form's inputs for ``fields`` hold (empty inputs left out); a map
    that is not TOML adds its reason to ``errors`` (by input name) and is left out."""
    out: dict[str, Any] = {}
    for item in fields:
        if item.kind == "group":
            sub = read(item.children, form, errors)
            if sub:
                out[item.key] = sub
            continue
        raw = str(form.get(item.name, "")).replace("\r\n", "\n")
        if not raw.strip():
            continue
        value = _typed(item, raw, errors)
        if item.kind == "other" and isinstance(value, dict):
            out.update({k: v for k, v in value.items() if k not in out})
        elif value is not None:
            out[item.key] = value
    return out


def _typed(item: Field, raw: str, errors: dict[str, str]) -> Any:
    text = raw.strip()
    if item.kind in ("text", "enum", "duration"):
        return text
    if item.kind == "textarea":
        return raw
    if item.kind == "integer":
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else text
    if item.kind == "number":
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        try:
            return float(text)
        except ValueError:
            return text
    if item.kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if item.kind == "list":
        return [line.strip() for line in raw.split("\n") if line.strip()]
    if item.kind in ("table", "other"):
        try:
            return tomllib.loads(raw)
        except tomllib.TOMLDecodeError as exc:
            errors[item.name] = f"expected TOML lines like key = \"value\": {exc}"
            return None
    return parse_value(text)


def field_for(fields: list[Field], path: str) -> Field | None:
    """The field whose key path is ``path`` or, failing that, its nearest parent."""
    by_path = {f.path: f for f in walk(fields)}
    while path:
        if path in by_path:
            return by_path[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None
