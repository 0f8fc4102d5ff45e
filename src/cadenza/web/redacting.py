"""Responses through the home's redactor: the API's last line of defence for secrets.

Every JSON answer of a route passes through :meth:`Redactor.redact_value` (known secret
values, secret-looking values and keys), whatever the service layer returned; server-sent
events are redacted line by line. Only the three answers that carry a secret made for the
caller on purpose — the session's CSRF token at login, a new API token, a generated
password — bypass it, and they carry nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from cadenza.home import Home


def redacting_response(home: Home | None) -> type[JSONResponse]:
    """A JSONResponse class whose content goes through ``home``'s redactor."""

    class RedactedJSONResponse(JSONResponse):
        def render(self, content: Any) -> bytes:
            if home is None:
                return super().render(content)
            # FastAPI hands over its serialized answer (JSON types only): redacted and
            # dumped as it is. Anything else (a type json cannot dump) is encoded first.
            try:
                return super().render(home.redactor.redact_value(content))
            except TypeError:
                return super().render(home.redactor.redact_value(jsonable_encoder(content)))

    return RedactedJSONResponse


class OwnSecretResponse(JSONResponse):
    """An answer carrying a secret made for its caller (shown once): not redacted."""
