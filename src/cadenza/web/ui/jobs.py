"""The jobs pages (docs/ui.md "Pages: jobs"):

* ``GET /jobs`` — the catalogue: last state, schedule in words, next fire, the strip of the
  last runs, enable switch, Run now, the ⋯ menu; search (``q``) and tag chips (``tag``) in
  the URL;
* ``GET /jobs/{id}`` — a job's page: definition and TOML, next fires with DST marks,
  presets, the runs × steps grid, duration and success charts, Run now;
* ``GET /jobs/{id}/run`` — Run with parameters (``preset`` picks a preset; htmx gets the
  form alone), ``POST`` runs it, ``POST /jobs/{id}/presets`` saves it as a preset;
* ``POST /jobs/{id}/run-now`` and ``POST /jobs/{id}/enabled`` — the catalogue's actions.

Every read and write is the service layer's (:mod:`cadenza.services.job_pages`, the job
and run services); a run started here lands on its page (``HX-Redirect: /runs/{id}``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cadenza.domain.errors import StaleConfigError
from cadenza.services.errors import InvalidRequest
from cadenza.services.job_pages import FormProblems, JobPagesService, preset_diff, refilled
from cadenza.services.runs import RunRequestInput
from cadenza.web.api.errors import StaleEdit
from cadenza.web.auth import services_for
from cadenza.web.ui.auth import PageEditor, PageOperator, PageViewer
from cadenza.web.ui.render import choose_language, is_htmx, render
from cadenza.web.ui.scheduling import current_pause

router = APIRouter(include_in_schema=False)

MULTI_FIELDS = frozenset({"run_steps"})


async def form_fields(request: Request) -> dict[str, Any]:
    """The submitted form as a dict (``run_steps`` as a list: one per checked step)."""
    form = await request.form()
    out: dict[str, Any] = {}
    for key, value in form.multi_items():
        if not isinstance(value, str):
            continue  # no file inputs on these forms
        if key in MULTI_FIELDS:
            out.setdefault(key, []).append(value)
        else:
            out[key] = value
    return out


Fields = Annotated[dict[str, Any], Depends(form_fields)]


def _to_run(request: Request, run_id: str) -> Response:
    """A started run's page: ``HX-Redirect`` for htmx, a 303 for a plain form."""
    target = f"/runs/{run_id}"
    if is_htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


@router.get("/jobs", response_class=HTMLResponse)
def catalogue(me: PageViewer, request: Request,
              q: Annotated[str, Query(max_length=200)] = "",
              tag: Annotated[list[str] | None, Query(max_length=64)] = None) -> HTMLResponse:
    """The jobs catalogue, filtered by the search ``q`` and the tags ``tag``."""
    with services_for(request, me) as services:
        view = JobPagesService(services, choose_language(request, me)).catalogue(q, tag or ())
    return render(request, "ui/jobs_list.html", {"view": view,
                                                 "paused": current_pause(request)},
                  me=me, nav="jobs")


@router.post("/jobs/{job_id}/enabled", response_class=HTMLResponse)
def set_enabled(job_id: str, me: PageEditor, request: Request,
                enabled: Annotated[str, Form(max_length=5)]) -> HTMLResponse:
    """The enable switch: write ``enabled`` of the job in jobs.toml (comments kept) and
    answer the switch in its new position."""
    if enabled not in ("true", "false"):
        raise InvalidRequest("enabled: expected true or false")
    with services_for(request, me) as services:
        JobPagesService(services).set_enabled(job_id, enabled == "true")
    return render(request, "ui/_jobs_switch.html",
                  {"job": {"id": job_id, "enabled": enabled == "true"}}, me=me)


@router.post("/jobs/{job_id}/run-now")
def run_now(job_id: str, me: PageOperator, request: Request) -> Response:
    """Run now: queue a run of the job as it is defined, then go to its page."""
    with services_for(request, me) as services:
        run_id = services.runs.enqueue(RunRequestInput(job_id))
    return _to_run(request, run_id)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: str, me: PageViewer, request: Request) -> HTMLResponse:
    """A job's page."""
    with services_for(request, me) as services:
        view = JobPagesService(services, choose_language(request, me)).job_page(job_id)
    return render(request, "ui/jobs_page.html", {"view": view}, me=me, nav="jobs")


@router.get("/jobs/{job_id}/run", response_class=HTMLResponse)
def run_form(job_id: str, me: PageViewer, request: Request,
             preset: Annotated[str, Query(max_length=64)] = "") -> HTMLResponse:
    """Run with parameters; an htmx request (the preset picker) gets the form alone."""
    with services_for(request, me) as services:
        form = JobPagesService(services).run_form(job_id, preset or None)
    if is_htmx(request):
        return render(request, "ui/_jobs_run_form.html", {"form": form}, me=me)
    return render(request, "ui/jobs_run.html", {"form": form}, me=me, nav="jobs")


@router.post("/jobs/{job_id}/run")
def run_with_parameters(job_id: str, me: PageOperator, request: Request,
                        fields: Fields) -> Response:
    """Run the job with the form's values (the picked preset, and what was changed on top
    of it), then go to the run's page."""
    with services_for(request, me) as services:
        pages = JobPagesService(services)
        form = pages.run_form(job_id, str(fields.get("preset") or "") or None)
        try:
            asked = pages.submitted(form, fields)
        except FormProblems as exc:
            # The form again, as filled, each refused value's problem under its field.
            again = refilled(form, fields, exc.fields)
            more = {"more_args": str(fields.get("more_args", ""))}
            if is_htmx(request):
                return render(request, "ui/_jobs_run_form.html", {"form": again, **more},
                              me=me, status=422,
                              headers={"HX-Retarget": "#run-form", "HX-Reswap": "outerHTML"})
            return render(request, "ui/jobs_run.html", {"form": again, **more}, me=me,
                          nav="jobs", status=422)
        run_id = services.runs.enqueue(asked)
    return _to_run(request, run_id)


@router.post("/jobs/{job_id}/presets", response_class=HTMLResponse)
def save_preset(job_id: str, me: PageEditor, request: Request, fields: Fields) -> Response:
    """Save the form's values as a preset in jobs.toml (comments kept); a save based on an
    older jobs.toml is refused with the diff it would make to the current one."""
    name = str(fields.get("preset_name", "")).strip()
    if not name:
        raise InvalidRequest("preset_name: give the preset a name")
    base_hash = str(fields.get("base_hash", ""))
    with services_for(request, me) as services:
        pages = JobPagesService(services)
        form = pages.run_form(job_id, str(fields.get("preset") or "") or None)
        values = pages.preset_values(form, fields, name)
        try:
            written = services.jobs.save_preset(job_id, name, values, base_hash)
        except StaleConfigError as exc:
            current = services.jobs.document()
            raise StaleEdit(str(exc), current.hash,
                            preset_diff(current.text, job_id, name, values)) from None
    return render(request, "ui/_jobs_preset_saved.html",
                  {"name": name, "job_id": job_id, "hash": written.hash}, me=me,
                  headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"})
