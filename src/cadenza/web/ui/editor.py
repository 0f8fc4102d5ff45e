"""The job editor (docs/ui.md "Pages: editor"): Create (``/jobs/new``), Duplicate
(``/jobs/new?from=ID``), Edit (``/jobs/{id}/edit``) and Delete, with a form generated from
the config models' JSON schema (:mod:`cadenza.web.ui.editor_form`) and a raw TOML tab.

Both tabs validate as the person types (``/editor/check``, ``/editor/check-toml``: the
problems of ``cadenza validate``, under the field in the form, by line and column in the
TOML tab) and both save through the job edit services (create/edit/delete with the hash of
the jobs.toml the page was loaded from; the TOML tab's text is written as typed, so the
comments typed there are kept too): comments and order are kept, the node reloads, a
stale save answers 409 with the diff and leaves the person's text in the page, a bad save
leaves the file unchanged.
"""

from __future__ import annotations

import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.datastructures import FormData

from cadenza.domain.errors import ConfigError, StaleConfigError
from cadenza.services import job_drafts
from cadenza.services.errors import InvalidRequest, NotFound
from cadenza.web.auth import services_for
from cadenza.web.ui.auth import PageEditor
from cadenza.web.ui.editor_form import OTHER, Field, build, field_for, read, slot_id, walk
from cadenza.web.ui.render import N_, render

router = APIRouter(include_in_schema=False)

JOB_SLOT = "err-job"
_MISSING = re.compile(r"missing required key '([A-Za-z0-9_]+)'")
ID_NAME = "id"
NEW_STEP_TYPE = "python"
PRIMARY_KEYS = ("description", "tags", "schedule", "timezone", "enabled", "params")
"""The job's keys shown first; the others (all generated too) under "More options"."""


async def _form(request: Request) -> FormData:
    return await request.form()


Form = Annotated[FormData, Depends(_form)]


@dataclass
class StepForm:
    """One step's block: its stable ``uid``, name, type and generated fields (those of its
    type first, then the keys every step has)."""

    uid: str
    name: str
    type: str
    fields: list[Field]
    common: list[Field]

    @property
    def prefix(self) -> str:
        return f"step.{self.uid}"

    @property
    def slot(self) -> str:
        return slot_id(self.prefix)

    @property
    def name_field(self) -> str:
        return f"{self.prefix}.name"

    @property
    def type_field(self) -> str:
        return f"{self.prefix}.type"

    @property
    def name_slot(self) -> str:
        return slot_id(self.name_field)

    @property
    def type_slot(self) -> str:
        return slot_id(self.type_field)


@dataclass
class Draft:
    """A job as the form holds it, and what it takes to place problems in the form."""

    job_id: str
    fields: list[Field]
    steps: list[StepForm]
    table: dict[str, Any] = field(default_factory=dict)
    input_errors: dict[str, str] = field(default_factory=dict)


def _step_form(uid: str, index: int, values: Mapping[str, Any],
               posted_other: bool = False) -> StepForm:
    kind = str(values.get("type") or "")
    schema = job_drafts.step_schemas().get(kind) or job_drafts.step_base_schema()
    made = build(schema, values, name=f"step.{uid}", path=f"steps[{index}]",
                 skip=("name", "type"), posted_other=posted_other)
    common = set(job_drafts.common_step_keys())
    return StepForm(uid, str(values.get("name") or ""), kind,
                    [f for f in made if f.key not in common],
                    [f for f in made if f.key in common])


def _new_uid() -> str:
    return "s" + secrets.token_hex(4)


def _draft_of(job_id: str, table: Mapping[str, Any], posted_other: bool = False) -> Draft:
    fields = build(job_drafts.job_schema(), table, name="job", path="", skip=("id", "steps"),
                   posted_other=posted_other)
    steps = table.get("steps")
    forms = [_step_form(_new_uid(), i, s) for i, s in
             enumerate(steps if isinstance(steps, list) else []) if isinstance(s, Mapping)]
    return Draft(job_id, fields, forms, dict(table))


def _read_draft(form: FormData, job_id: str) -> Draft:
    """The job the form's inputs describe."""
    values = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    draft = _draft_of(job_id, {}, posted_other=f"job.{OTHER}" in values)
    draft.table = read(draft.fields, values, draft.input_errors)
    steps: list[dict[str, Any]] = []
    for index, uid in enumerate(v for v in form.getlist("step_uid") if isinstance(v, str)):
        kind = values.get(f"step.{uid}.type", "").strip()
        step = _step_form(uid, index, {"type": kind},
                          posted_other=f"step.{uid}.{OTHER}" in values)
        step.name = values.get(f"step.{uid}.name", "").strip()
        draft.steps.append(step)
        table = {"name": step.name, "type": kind}
        table.update(read(step.fields + step.common, values, draft.input_errors))
        steps.append(table)
    if steps:
        draft.table["steps"] = steps
    return draft


def _slots_of(draft: Draft) -> list[str]:
    slots = [JOB_SLOT, slot_id(ID_NAME)] + [f.slot for f in walk(draft.fields)]
    for step in draft.steps:
        slots += [step.slot, slot_id(step.name_field), slot_id(step.type_field)]
        slots += [f.slot for f in walk(step.fields + step.common)]
    return slots


def _placed(draft: Draft, problems: list[Any]) -> dict[str, list[dict[str, str]]]:
    """Each problem under the input its key path names (or its nearest parent)."""
    out: dict[str, list[dict[str, str]]] = {}

    def put(slot: str, severity: str, message: str, text: str) -> None:
        out.setdefault(slot, []).append({"severity": severity, "message": message,
                                         "text": text})

    for name, message in draft.input_errors.items():
        put(slot_id(name), "error", message, message)
    prefix = f"jobs.{draft.job_id}"
    for problem in problems:
        path = problem.path[len(prefix):].lstrip(".") if problem.path.startswith(prefix) \
            else ""
        missing = _MISSING.match(problem.message)
        if missing:  # said of the table: put it under the missing key's own input
            path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        put(_slot_for(draft, path), problem.severity, problem.message, str(problem))
    return out


def _slot_for(draft: Draft, path: str) -> str:
    if path.startswith("steps["):
        index_text, _, rest = path[len("steps["):].partition("]")
        if index_text.isdigit() and int(index_text) < len(draft.steps):
            step = draft.steps[int(index_text)]
            key = rest.lstrip(".")
            if key in ("name", "type"):
                return slot_id(f"{step.prefix}.{key}")
            found = field_for(step.fields + step.common, path)
            if found is None and key.isidentifier():
                return _other_slot(step.fields, step.slot)
            return found.slot if found is not None else step.slot
        return JOB_SLOT
    found = field_for(draft.fields, path)
    if found is None and "." not in path and "[" not in path and path:
        return _other_slot(draft.fields, JOB_SLOT)
    return found.slot if found is not None else JOB_SLOT


def _other_slot(fields: list[Field], fallback: str) -> str:
    """The slot of the "other keys" field among ``fields`` (for an unknown key)."""
    return next((f.slot for f in fields if f.key == OTHER), fallback)


def _check_answer(request: Request, me: Any, draft: Draft, problems: list[Any],
                  message: str | None = None, status: int = 200,
                  posted: set[str] | None = None) -> HTMLResponse:
    """The problems out of band into their slots: only the slots of the inputs the request
    came from (and of the groups and steps holding them), so that every target exists."""
    placed = _placed(draft, problems)
    errors = sum(1 for items in placed.values() for p in items if p["severity"] == "error")
    slots = _slots_of(draft)
    if posted is not None:
        shown = {slot_id(name) for name in posted}
        groups = {f.slot for f in walk(draft.fields) if f.kind == "group"}
        keep = shown | groups | {JOB_SLOT} | {s.slot for s in draft.steps}
        slots = [s for s in slots if s in keep]
        placed = _fold(placed, keep)
    return render(request, "ui/editor_check.html",
                  {"slots": slots, "placed": placed, "errors": errors,
                   "message": message, "problem_list": problems}, me=me, status=status)


def _fold(placed: dict[str, list[dict[str, str]]],
          keep: set[str]) -> dict[str, list[dict[str, str]]]:
    """Problems whose slot is not in the page put in the job's general slot instead."""
    out: dict[str, list[dict[str, str]]] = {}
    for slot, items in placed.items():
        out.setdefault(slot if slot in keep else JOB_SLOT, []).extend(items)
    return out


def _check_form(request: Request, me: Any, form: FormData) -> tuple[Draft, list[Any]]:
    creating = form.get("mode") == "create"
    job_id = str(form.get(ID_NAME) or "").strip()
    draft = _read_draft(form, job_id)
    with services_for(request, me) as services:
        try:
            problems: list[Any] = job_drafts.check_table(services, job_id, draft.table,
                                                         creating=creating)
        except InvalidRequest as exc:
            draft.input_errors[ID_NAME] = str(exc)
            problems = []
    return draft, problems


# --- pages ---------------------------------------------------------------------------

def _page(request: Request, me: Any, *, mode: str, job_id: str, table: Mapping[str, Any],
          toml: str, base_hash: str, source: str | None = None) -> HTMLResponse:
    with services_for(request, me) as services:
        refs = job_drafts.reference_names(services)
    draft = _draft_of(job_id, table)
    return render(request, "ui/editor_page.html", {
        "mode": mode, "job_id": job_id, "source": source, "draft": draft, "toml": toml,
        "base_hash": base_hash, "refs": refs, "step_types": list(job_drafts.step_schemas()),
        "primary": PRIMARY_KEYS,
        "save_url": "/jobs/new" if mode == "create" else f"/jobs/{job_id}/edit",
    }, me=me, nav="jobs")


@router.get("/jobs/new", response_class=HTMLResponse)
def new_job(me: PageEditor, request: Request,
            from_: Annotated[str | None, Query(alias="from", max_length=64)] = None,
            ) -> HTMLResponse:
    """Create a job (blank), or Duplicate one (``?from=ID``: its values under a new id)."""
    with services_for(request, me) as services:
        base_hash = services.jobs.document().hash
        table: dict[str, Any] = {"description": ""}
        job_id = "new-job"
        if from_:
            table = job_drafts.job_table(services, from_)
            job_id = f"{from_}-copy"[:64]
    return _page(request, me, mode="create", job_id=job_id, table=table,
                 toml=job_drafts.table_text(job_id, table), base_hash=base_hash,
                 source=from_)


@router.get("/jobs/{job_id}/edit", response_class=HTMLResponse)
def edit_job(job_id: str, me: PageEditor, request: Request) -> HTMLResponse:
    """Edit a job: the form, the TOML tab, and Delete."""
    with services_for(request, me) as services:
        table = job_drafts.job_table(services, job_id)
        text = job_drafts.job_text(services, job_id)
    return _page(request, me, mode="edit", job_id=job_id, table=table, toml=text.text,
                 base_hash=text.hash)


# --- fragments -----------------------------------------------------------------------

@router.get("/editor/step", response_class=HTMLResponse)
def new_step(me: PageEditor, request: Request, type: str = NEW_STEP_TYPE) -> HTMLResponse:
    """A new step's block (appended to the form's steps)."""
    step = _step_form(_new_uid(), 0, {"type": type})
    return render(request, "ui/_editor_step.html",
                  {"step": step, "step_types": list(job_drafts.step_schemas()),
                   "refs": _refs(request, me)}, me=me)


@router.get("/editor/step-fields", response_class=HTMLResponse)
def step_fields(me: PageEditor, request: Request, uid: str) -> HTMLResponse:
    """A step's fields for the type just picked, keeping the values that still apply."""
    if not uid.isalnum() or len(uid) > 32:
        raise InvalidRequest("expected a step uid of letters and digits")
    prefix = f"step.{uid}."
    query = request.query_params
    kind = query.get(f"{prefix}type", NEW_STEP_TYPE)
    step = _step_form(uid, 0, {"type": kind})
    errors: dict[str, str] = {}
    kept = read(step.fields + step.common, dict(query), errors)
    step = _step_form(uid, 0, {**kept, "type": kind})
    return render(request, "ui/_editor_step_fields.html",
                  {"step": step, "refs": _refs(request, me)}, me=me)


def _refs(request: Request, me: Any) -> dict[str, list[str]]:
    with services_for(request, me) as services:
        return job_drafts.reference_names(services)


@router.post("/editor/check", response_class=HTMLResponse)
def check_form(me: PageEditor, request: Request, form: Form) -> HTMLResponse:
    """Live validation of the form: every field's problems, out of band under it."""
    draft, problems = _check_form(request, me, form)
    return _check_answer(request, me, draft, problems, posted=set(form.keys()))


@router.post("/editor/check-toml", response_class=HTMLResponse)
def check_toml(me: PageEditor, request: Request, form: Form) -> HTMLResponse:
    """Live validation of the TOML tab: the problems by line and column of the text."""
    text = str(form.get("toml") or "")
    creating = form.get("mode") == "create"
    job_id = _toml_id(text, str(form.get(ID_NAME) or ""), creating)
    message = None
    located: list[job_drafts.LocatedProblem] = []
    with services_for(request, me) as services:
        try:
            located = job_drafts.check_text(services, job_id, text, creating=creating)
            if not any(p.problem.is_error for p in located):
                job_drafts.parse_job_text(job_id, text)
        except InvalidRequest as exc:
            message = str(exc)
    return render(request, "ui/_editor_toml_problems.html",
                  {"located": located, "message": message}, me=me)


def _toml_id(text: str, given: str, creating: bool) -> str:
    """The job a TOML text is about: the one ``[jobs.ID]`` it defines when creating."""
    if not creating:
        return given
    try:
        jobs = tomllib.loads(text).get("jobs")
    except tomllib.TOMLDecodeError:
        return given
    return next(iter(jobs)) if isinstance(jobs, dict) and len(jobs) == 1 else given


# --- saves ---------------------------------------------------------------------------

def _save(request: Request, me: Any, form: FormData, *, creating: bool,
          job_id: str) -> Response:
    source = form.get("source")
    base_hash = str(form.get("override_hash") or form.get("base_hash") or "")
    if not base_hash:
        raise InvalidRequest("missing base_hash: reload the page and edit again")
    draft: Draft | None = None
    text = ""
    if source == "toml":
        text = str(form.get("toml") or "")
        job_id = _toml_id(text, job_id, creating)
        table = job_drafts.parse_job_text(job_id, text)
    else:
        if creating:
            job_id = str(form.get(ID_NAME) or "").strip()
        draft = _read_draft(form, job_id)
        if draft.input_errors:
            return _check_answer(request, me, draft, [], status=422, posted=set(form.keys()),
                                 message=N_("the job is not saved: fix the fields marked below"))
        table = draft.table
    with services_for(request, me) as services:
        try:
            if source == "toml":  # written as typed: its comments too
                _save_text(services, job_id, text, table, base_hash, creating)
            elif creating:
                services.jobs.create(job_id, table, base_hash)
            else:
                services.jobs.edit(job_id, table, base_hash)
        except StaleConfigError as exc:
            return _stale(request, me, services, exc, job_id, table, source)
        except (ConfigError, InvalidRequest) as exc:
            problems = [p for p in getattr(exc, "problems", []) if hasattr(p, "path")]
            if draft is None:
                if not isinstance(exc, ConfigError):
                    raise
                return _toml_refused(request, me, services, job_id, text, creating)
            if isinstance(exc, InvalidRequest):
                draft.input_errors[ID_NAME] = str(exc)
            return _check_answer(request, me, draft, problems, status=422,
                                 posted=set(form.keys()),
                                 message=N_("the job is not saved: jobs.toml is unchanged"))
    return Response(status_code=200, headers={"HX-Redirect": f"/jobs/{job_id}"})


def _save_text(services: Any, job_id: str, text: str, table: Mapping[str, Any],
               base_hash: str, creating: bool) -> None:
    """The TOML tab's text written as typed, comments included; a job whose keys sit in
    no ``[jobs.ID]`` table of its own (inline in ``[jobs]``) is saved by its table."""
    try:
        services.jobs.save_text(job_id, text, base_hash, creating=creating)
    except NotFound:
        services.jobs.edit(job_id, table, base_hash)


def _toml_refused(request: Request, me: Any, services: Any, job_id: str, text: str,
                  creating: bool) -> HTMLResponse:
    """A refused save of the TOML tab: the flash, and the problems by line:col of the
    text, out of band under the text."""
    located = job_drafts.check_text(services, job_id, text, creating=creating)
    return render(request, "ui/_editor_toml_problems.html", {
        "located": located, "oob": True,
        "message_flash": N_("the job is not saved: jobs.toml is unchanged; see the problems "
                            "under the text")}, me=me, status=422)


def _stale(request: Request, me: Any, services: Any, exc: StaleConfigError, job_id: str,
           table: Mapping[str, Any] | None, source: Any) -> HTMLResponse:
    from cadenza.services.job_edits import preview_diff

    current = services.jobs.document()
    return render(request, "ui/_editor_stale.html", {
        "message": str(exc), "diff": preview_diff(current.text, job_id, table),
        "hash": current.hash, "form": "toml-form" if source == "toml" else "job-form",
        "deleting": table is None, "job_id": job_id,
    }, me=me, status=409, headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"})


@router.post("/jobs/new", response_class=HTMLResponse)
def create_job(me: PageEditor, request: Request, form: Form) -> Response:
    """Save a new job (from the form or the TOML tab); then its page."""
    return _save(request, me, form, creating=True, job_id="")


@router.post("/jobs/{job_id}/edit", response_class=HTMLResponse)
def save_job(job_id: str, me: PageEditor, request: Request, form: Form) -> Response:
    """Save the job (from the form or the TOML tab); then its page."""
    return _save(request, me, form, creating=False, job_id=job_id)


@router.post("/jobs/{job_id}/delete", response_class=HTMLResponse)
def delete_job(job_id: str, me: PageEditor, request: Request, form: Form) -> Response:
    """Delete the job from jobs.toml once its id is typed in; its runs stay in the
    history. Then the jobs catalogue."""
    base_hash = str(form.get("override_hash") or form.get("base_hash") or "")
    if str(form.get("confirm") or "").strip() != job_id:
        raise InvalidRequest(f"type the job's id ({job_id}) to delete it")
    if not base_hash:
        raise InvalidRequest("missing base_hash: reload the page and delete again")
    with services_for(request, me) as services:
        try:
            services.jobs.delete(job_id, base_hash)
        except StaleConfigError as exc:
            return _stale(request, me, services, exc, job_id, None, "delete")
    return Response(status_code=200, headers={"HX-Redirect": "/jobs"})
