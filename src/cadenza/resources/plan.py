"""The pools of a configuration as leasing needs them (docs/pools.md): which
members each pool has, and what a run of each job, and each of its steps, must hold."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from cadenza.config.loader import LoadedConfig
from cadenza.config.schema_jobs import JobConfig
from cadenza.config.schema_settings import Pool, PoolMember


def job_needs(job: JobConfig) -> dict[str, int]:
    """Pool -> members a run of ``job`` holds for its whole run: the job's ``requires``,
    taken with the run's claim (a step's own needs are :func:`step_needs`)."""
    return dict(job.requires)


def step_needs(job: JobConfig) -> dict[str, dict[str, int]]:
    """Step name -> pool -> members the run must hold while that step runs: the step's
    ``requires``, and for an http step's ``via = POOL`` one route of POOL. What the run
    already holds of a pool (its job's ``requires``, routes bound to its members) counts:
    the step's start takes only the difference, its end returns that (docs/pools.md)."""
    out: dict[str, dict[str, int]] = {}
    for step in job.steps:
        needs = dict(step.requires)
        via = getattr(step, "via", None)
        if isinstance(via, str) and needs.get(via, 0) < 1:
            needs[via] = 1
        if needs:
            out[step.name] = needs
    return out


def peak_needs(job: JobConfig) -> dict[str, int]:
    """Pool -> the most members a run of ``job`` holds at once (the job's ``requires`` or
    a step's, the larger per pool): what ``cadenza simulate`` holds for the whole run."""
    needs = job_needs(job)
    for per_step in step_needs(job).values():
        for pool, count in per_step.items():
            needs[pool] = max(needs.get(pool, 0), count)
    return needs


@dataclass(frozen=True)
class PoolPlan:
    """The pools of one configuration, as leasing needs them."""

    pools: Mapping[str, Pool] = field(default_factory=dict)
    members: Mapping[str, tuple[str, PoolMember]] = field(default_factory=dict)
    """resource id -> (pool, member)."""
    needs: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """job id -> pool -> count held for the whole run (jobs that need nothing are absent)."""
    steps: Mapping[str, Mapping[str, Mapping[str, int]]] = field(default_factory=dict)
    """job id -> step -> pool -> count held while that step runs (:func:`step_needs`)."""
    peak: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """job id -> pool -> the most held at once (:func:`peak_needs`; ``cadenza simulate``)."""

    @classmethod
    def of(cls, config: LoadedConfig) -> PoolPlan:
        """The plan of ``config`` (its ``[pools]`` and the jobs' needs)."""
        pools = dict(config.settings.pools)
        members = {m.id: (name, m) for name, pool in pools.items() for m in pool.members}
        needs = {job_id: n for job_id, job in config.jobs.items() if (n := job_needs(job))}
        steps = {job_id: s for job_id, job in config.jobs.items() if (s := step_needs(job))}
        peak = {job_id: p for job_id, job in config.jobs.items() if (p := peak_needs(job))}
        return cls(pools, members, needs, steps, peak)

    def step(self, job_id: str, step: str | None) -> Mapping[str, int]:
        """What ``step`` of ``job_id`` needs while it runs (pool -> count)."""
        if step is None:
            return {}
        return self.steps.get(job_id, {}).get(step, {})

    def cooldown(self, pool: str) -> timedelta:
        """The pool's cooldown (30 s for a pool no longer configured)."""
        found = self.pools.get(pool)
        return found.cooldown if found is not None else timedelta(seconds=30)

    def binds_routes(self, pools: list[str]) -> bool:
        """Whether a member of one of ``pools`` is bound to a route (a snapshot of them
        must then read those routes too)."""
        binding = self._binding
        return bool(binding) and any(name in binding for name in pools)

    def probed(self, pool: str) -> bool:
        """Whether the pool's members come back from COOLDOWN through health probes."""
        return pool in self._probed

    # Asked per claim and per member a claim looks at: worked out once per plan.
    @cached_property
    def _binding(self) -> frozenset[str]:
        return frozenset(name for name, pool in self.pools.items()
                         if any(member.route is not None for member in pool.members))

    @cached_property
    def _probed(self) -> frozenset[str]:
        return frozenset(name for name, pool in self.pools.items()
                         if pool.health is not None and pool.kind == "route")
