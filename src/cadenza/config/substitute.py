"""``${env.NAME}`` and ``${secret.NAME}`` in cadenza.toml, resolved at load time.

Secrets come from an injected ``resolve_secret(name) -> str | None`` (the encrypted store
of ``cadenza secrets set``), environment variables from an injected mapping, so tests
and the CLI choose their sources. Every secret value used is returned, so the caller can
register it for redaction; no message ever contains a resolved value. A resolved value
is always a string (tokens live inside strings); ``$${`` writes a literal ``${``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cadenza.config.problems import KeyPath, Reporter
from cadenza.domain.errors import CadenzaError
from cadenza.domain.params import ESCAPED, TOKEN_RE, ParamError, parse_token

SecretResolver = Callable[[str], "str | None"]


def no_secrets(name: str) -> str | None:
    """The default resolver: no secret is known."""
    return None


class Substitution:
    """Resolves the tokens of one file's values, reporting what cannot be resolved."""

    def __init__(self, report: Reporter, resolve_secret: SecretResolver,
                 environ: Mapping[str, str]) -> None:
        self.report = report
        self.resolve_secret = resolve_secret
        self.environ = environ
        self.secret_values: set[str] = set()

    def resolve(self, value: Any, path: KeyPath = ()) -> Any:
        """``value`` with every env and secret token replaced (tables and arrays walked)."""
        if isinstance(value, dict):
            return {k: self.resolve(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, (*path, k)) for k, v in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            return self._render(value, path)
        return value

    def _render(self, text: str, path: KeyPath) -> str:
        out: list[str] = []
        last = 0
        for match in TOKEN_RE.finditer(text):
            try:
                token = parse_token(match.group(1))
            except ParamError:
                continue  # reported by the token check
            out.append(text[last:match.start()])
            last = match.end()
            name = token.parts[0] if token.parts else ""
            if token.namespace == "env":
                out.append(self._env(name, path))
            elif token.namespace == "secret":
                out.append(self._secret(name, path))
            else:
                out.append(match.group(0))
        out.append(text[last:])
        return "".join(out).replace(ESCAPED, "${")

    def _env(self, name: str, path: KeyPath) -> str:
        value = self.environ.get(name)
        if value is None:
            self.report.error(path, f"environment variable {name!r} is not set "
                              f"(referenced as ${{env.{name}}})")
            return ""
        return value

    def _secret(self, name: str, path: KeyPath) -> str:
        try:
            value = self.resolve_secret(name)
        except CadenzaError as exc:
            # The name unquoted: a redactor masks a quoted value after the word "secret".
            self.report.error(path, f"secret {name} cannot be read: {exc}")
            return ""
        if value is None:
            self.report.error(path, f"secret {name!r} is not set: set it with "
                              f"`cadenza secrets set {name}`")
            return ""
        if value:
            self.secret_values.add(value)
        return value
