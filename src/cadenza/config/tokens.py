"""Which ``${...}`` tokens may appear where (docs/configuration.md), checked at validation time.

The grammar is the run-time one (:mod:`cadenza.domain.params`); this module adds where
each namespace is allowed and what can be known before a run:

* ``cadenza.toml``: only ``${env.NAME}`` and ``${secret.NAME}`` (resolved at load time);
* ``jobs.toml``: never ``env`` or ``secret`` (secrets never live in jobs.toml);
* a job's or preset's ``params``: dates, ``run`` and ``job`` facts only (no ``params``,
  no ``steps``: parameters are inputs, not computations);
* a step: also ``${params.NAME}`` (NAME declared in the job's ``params`` or the step's
  ``op_kwargs``) and ``${steps.STEP.FIELD}`` (STEP an earlier step of the same job).

``$${`` writes a literal ``${``; a ``${`` that never closes is an error.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cadenza.config.problems import KeyPath, Reporter
from cadenza.domain.params import ESCAPED, TOKEN_RE, ParamError, parse_token

Where = Literal["settings", "params", "step"]


@dataclass(frozen=True)
class StepScope:
    """What a step's tokens may name: earlier steps, all steps of the job, declared params."""

    earlier: Sequence[str]
    all_steps: Sequence[str]
    params: Collection[str]
    this_step: str = ""
    extra_params: Collection[str] = field(default_factory=tuple)


def check_tokens(value: object, path: KeyPath, report: Reporter, where: Where,
                 scope: StepScope | None = None) -> None:
    """Report every misplaced or malformed token in ``value`` (walks tables and arrays)."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_tokens(item, (*path, key), report, where, scope)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            check_tokens(item, (*path, k), report, where, scope)
    elif isinstance(value, str) and "${" in value:
        for message in token_problems(value, where, scope):
            report.error(path, message)


def token_problems(text: str, where: Where, scope: StepScope | None = None) -> list[str]:
    """What is wrong with the tokens of one string (empty when nothing is)."""
    out: list[str] = []
    rest = TOKEN_RE.sub("", text).replace(ESCAPED, "")
    if "${" in rest:
        out.append("unterminated '${': expected ${NAMESPACE.NAME} (write $${ for a literal ${)")
    for match in TOKEN_RE.finditer(text):
        try:
            token = parse_token(match.group(1))
        except ParamError as exc:
            out.append(str(exc))
            continue
        problem = _placement(token.raw, token.namespace, token.parts, where, scope)
        if problem:
            out.append(problem)
    return out


def _placement(raw: str, namespace: str, parts: tuple[str, ...], where: Where,
               scope: StepScope | None) -> str | None:
    if where == "settings":
        if namespace not in ("env", "secret"):
            return f"{raw}: only ${{env.NAME}} and ${{secret.NAME}} can be used in cadenza.toml"
        return None
    if namespace in ("env", "secret"):
        return (f"{raw}: {namespace} tokens belong in cadenza.toml (for example in a "
                f"connection's headers), never in jobs.toml")
    if where == "params":
        if namespace == "steps":
            return f"{raw}: step outputs can be used only inside a step"
        if namespace == "params":
            return f"{raw}: a parameter cannot refer to another parameter"
        return None
    if scope is None:
        return None
    if namespace == "params" and parts[0] not in scope.params \
            and parts[0] not in scope.extra_params:
        declared = ", ".join(sorted({*scope.params, *scope.extra_params})) or "none"
        return (f"{raw}: parameter {parts[0]!r} is not declared in the job's params or this "
                f"step's op_kwargs (declared: {declared})")
    if namespace == "steps":
        name = parts[0]
        if name in scope.earlier:
            return None
        if name == scope.this_step:
            return f"{raw}: a step cannot read its own output; expected an earlier step"
        if name in scope.all_steps:
            return (f"{raw}: step {name!r} runs after this one; expected an earlier step "
                    f"(earlier: {', '.join(scope.earlier) or 'none'})")
        return (f"{raw}: no step {name!r} in this job; expected an earlier step "
                f"(earlier: {', '.join(scope.earlier) or 'none'})")
    return None
