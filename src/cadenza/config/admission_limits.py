"""The admission limits of a loaded configuration (:class:`~cadenza.domain.admission.Limits`).

A thin adapter: the config layer knows the models, the domain takes plain mappings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cadenza.domain.admission import JobSpec, Limits, TagSpec, limits_from_config

if TYPE_CHECKING:
    from cadenza.config.loader import LoadedConfig
    from cadenza.config.schema_jobs import JobConfig
    from cadenza.config.schema_settings import Settings

_ZONEINFO_MARK = "zoneinfo/"


def server_timezone(environ: Mapping[str, str] | None = None,
                    localtime: Path = Path("/etc/localtime")) -> tzinfo:
    """The server's IANA zone (the default of a job without ``timezone``), else UTC.

    From ``$TZ`` when it names a zone, else from the ``/etc/localtime`` link
    (``.../zoneinfo/Europe/Paris``). A fixed offset would get DST wrong, so it is never used.
    """
    env = os.environ if environ is None else environ
    names = [env.get("TZ", "").lstrip(":")]
    try:
        target = str(localtime.resolve())
    except OSError:
        target = ""
    if _ZONEINFO_MARK in target:
        names.append(target.rsplit(_ZONEINFO_MARK, 1)[1])
    for name in names:
        if not name:
            continue
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            continue
    return UTC


def limits_from_settings(
    settings: Settings,
    jobs: Mapping[str, JobConfig],
    default_timezone: tzinfo | str | None = None,
) -> Limits:
    """:class:`Limits` from validated settings and jobs; jobs without a zone use
    ``default_timezone`` (default: :func:`server_timezone`)."""
    job_specs: dict[str, JobSpec] = {
        job_id: {
            "max_concurrency": job.max_concurrency,
            "budget_per_hour": job.budget_per_hour,
            "windows": list(job.windows),
            "timezone": job.timezone,
            "tags": list(job.tags),
        }
        for job_id, job in jobs.items()
    }
    tag_specs: dict[str, TagSpec] = {
        tag: {"max_concurrency": lim.max_concurrency, "budget_per_hour": lim.budget_per_hour}
        for tag, lim in settings.limits.tags.items()
    }
    return limits_from_config(
        max_concurrent_runs=settings.workers.max_concurrent_runs,
        jobs=job_specs,
        tags=tag_specs,
        default_timezone=server_timezone() if default_timezone is None else default_timezone,
    )


def limits_from_loaded(
    loaded: LoadedConfig, default_timezone: tzinfo | str | None = None
) -> Limits:
    """:class:`Limits` of a loaded home (``load_home``); see :func:`limits_from_settings`."""
    return limits_from_settings(loaded.settings, loaded.jobs, default_timezone)
