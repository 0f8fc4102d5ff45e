"""``/api/jobs``: the catalogue, one job, edits of jobs.toml, presets, run now."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel, Field

from cadenza.domain.errors import StaleConfigError
from cadenza.web.api.errors import ERROR_RESPONSES, StaleEdit
from cadenza.web.auth import AsEditor, AsOperator, AsViewer, context, services_for

router = APIRouter(prefix="/api/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


class JobBody(BaseModel):
    """A job's keys and steps as JSON (the TOML table of ``[jobs.ID]``), and the ``hash``
    of the jobs.toml the edit is based on (from ``GET /api/jobs/{id}``)."""

    definition: dict[str, Any]
    base_hash: str


class NewJobBody(JobBody):
    id: str = Field(max_length=64)


class PresetBody(BaseModel):
    name: str = Field(max_length=64)
    values: dict[str, Any]
    base_hash: str


class RunBody(BaseModel):
    """What "Run with parameters" sends."""

    params: dict[str, Any] = Field(default_factory=dict)
    step_args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    disabled_steps: list[str] = Field(default_factory=list)
    log_level: str | None = None
    preset: str | None = None


def _fire(fire: Any) -> dict[str, Any]:
    return {"local": fire.local, "utc": fire.utc, "schedule": fire.schedule, "dst": fire.dst,
            "calendar": fire.as_json()["calendar"]}


@router.get("")
def list_jobs(principal: AsViewer, request: Request) -> list[dict[str, Any]]:
    """Every job in file order, with its next fire and its last run."""
    with services_for(request, principal) as services:
        store = services.store()
        rows = []
        for job in services.jobs.list():
            fires = services.jobs.next_fires(job.id, 1).fires
            last = store.list_runs(job=job.id, limit=1)
            rows.append({**job.as_json(), "next_fire": _fire(fires[0]) if fires else None,
                         "last_run": {"id": last[0].id, "state": last[0].state.value,
                                      "finished_at": last[0].finished_at} if last else None})
        return context(request).answer(rows)  # type: ignore[return-value]  # the same JSON


@router.get("/{job_id}")
def get_job(job_id: str, principal: AsViewer, request: Request) -> dict[str, Any]:
    """The job's definition (secrets redacted), next fires, last runs, and the ``hash`` of
    jobs.toml to base an edit on."""
    from cadenza.services.history import RunQuery

    with services_for(request, principal) as services:
        shown = services.jobs.show(job_id)
        fires = services.jobs.next_fires(job_id, 10)
        runs = services.history.list_runs(RunQuery(job=job_id, limit=10))
        return {"id": job_id, "description": shown.description,
                "definition": shown.definition,
                "schedules": [vars(s) for s in fires.schedules],
                "next_fires": [_fire(f) for f in fires.fires],
                "last_runs": [r.as_json() for r in runs],
                "hash": services.jobs.document().hash}


def _stale(services: Any, exc: StaleConfigError, job_id: str,
           table: dict[str, Any] | None) -> StaleEdit:
    from cadenza.services.job_edits import preview_diff

    current = services.jobs.document()
    return StaleEdit(str(exc), current.hash, preview_diff(current.text, job_id, table))


@router.post("", status_code=201)
def create_job(body: NewJobBody, principal: AsEditor, request: Request) -> dict[str, Any]:
    """Add a job to jobs.toml (validated first; 409 with a diff on a stale ``base_hash``)."""
    with services_for(request, principal) as services:
        try:
            written = services.jobs.create(body.id, body.definition, body.base_hash)
        except StaleConfigError as exc:
            raise _stale(services, exc, body.id, body.definition) from None
    return {"id": body.id, "hash": written.hash, "reloaded": written.reloaded}


@router.put("/{job_id}")
def edit_job(job_id: str, body: JobBody, principal: AsEditor,
             request: Request) -> dict[str, Any]:
    """Replace the job's keys, keeping every comment of what is unchanged. The
    ``definition`` may be the one ``GET /api/jobs/{id}`` gave: a key whose value is
    unchanged keeps its spelling in jobs.toml, and a default the file leaves out stays
    out, so saving what was loaded leaves the file as it is."""
    with services_for(request, principal) as services:
        try:
            written = services.jobs.edit_definition(job_id, body.definition,
                                                    body.base_hash)
        except StaleConfigError as exc:
            raise _stale(services, exc, job_id, body.definition) from None
    return {"id": job_id, "hash": written.hash, "reloaded": written.reloaded}


@router.delete("/{job_id}")
def delete_job(job_id: str, base_hash: str, principal: AsEditor,
               request: Request) -> dict[str, Any]:
    """Remove the job from jobs.toml (its runs stay in the history)."""
    with services_for(request, principal) as services:
        try:
            written = services.jobs.delete(job_id, base_hash)
        except StaleConfigError as exc:
            raise _stale(services, exc, job_id, None) from None
    return {"id": job_id, "hash": written.hash, "reloaded": written.reloaded}


@router.post("/{job_id}/presets", status_code=201)
def save_preset(job_id: str, body: PresetBody, principal: AsEditor,
                request: Request) -> dict[str, Any]:
    """Save "run with parameters" values as a preset of the job."""
    with services_for(request, principal) as services:
        try:
            written = services.jobs.save_preset(job_id, body.name, body.values,
                                                body.base_hash)
        except StaleConfigError as exc:
            current = services.jobs.document()
            raise StaleEdit(str(exc), current.hash, "") from None
    return {"id": job_id, "preset": body.name, "hash": written.hash,
            "reloaded": written.reloaded}


@router.post("/{job_id}/runs", status_code=201)
def run_job(job_id: str, body: RunBody, principal: AsOperator, request: Request,
            response: Response,
            idempotency_key: str | None = Header(default=None, max_length=200),
            ) -> dict[str, Any]:
    """Queue a run now (trigger ``manual:<user>``). With ``Idempotency-Key``, the same key
    and body give the same run (200), the same key with another body 422."""
    from cadenza.services.idempotency import body_hash, enqueue_once
    from cadenza.services.runs import RunRequestInput

    run_request = RunRequestInput(job_id, body.params, body.preset, body.step_args,
                                  tuple(body.disabled_steps), body.log_level)
    with services_for(request, principal) as services:
        if idempotency_key is None:
            return {"run_id": services.runs.enqueue(run_request)}
        keyed = enqueue_once(services, principal.key, idempotency_key, run_request,
                             body_hash(job_id, body.model_dump()))
    if not keyed.created:
        response.status_code = 200
    return {"run_id": keyed.run_id}
