"""Responses through the home's redactor: the API's last line of defence for secrets.

Every JSON answer of a route passes through :meth:`Redactor.redact_value` (known secret
values, secret-looking values and keys), whatever the service layer returned; server-sent
events are redacted line by line. Only the three answers that carry a secret made for the
caller on purpose — the session's CSRF token at login, a new API token, a generated
password — bypass it, and they carry nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pydantic_core
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

if TYPE_CHECKING:
    from cadenza.home import Home


def redacting_response(home: Home | None) -> type[JSONResponse]:
    """A JSONResponse class whose content goes through ``home``'s redactor."""

    class RedactedJSONResponse(JSONResponse):
        def render(self, content: Any) -> bytes:
            # Redacted, then dumped by pydantic's serializer: an endpoint's answer
            # (``answer``) comes here as the service layer made it (datetimes and all), in
            # the same JSON that FastAPI's own serialization would give (datetimes in ISO
            # 8601 with ``Z``), without its validation and encoding passes, which cost more
            # than the rest of a request (docs/benchmarks.md, W6).
            redacted = content if home is None else home.redactor.redact_value(content)
            try:
                return pydantic_core.to_json(redacted)
            except pydantic_core.PydanticSerializationError:
                return super().render(jsonable_encoder(redacted))

    return RedactedJSONResponse


class OwnSecretResponse(JSONResponse):
    """An answer carrying a secret made for its caller (shown once): not redacted."""
