"""``http``: one HTTP request, to a URL or to a path of an ``http`` connection."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, model_validator

from cadenza.config.types import HeaderMap, HttpUrl, JsonMap, Ref, StatusPatterns, fail
from cadenza.steps.base import StepConfig
from cadenza.steps.registry import StepType

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class HttpConfig(StepConfig):
    """``url``, or ``connection`` (type http) plus an optional ``path`` starting with "/";
    ``json`` or ``body`` (not both); ``expect`` lists the accepted statuses (``"2xx"``,
    ``204``...); ``via`` names a route pool (default: the run's leased route)."""

    url: HttpUrl | None = None
    connection: Annotated[str | None, Ref("connection", "http")] = None
    path: str | None = None
    method: Method = "GET"
    headers: HeaderMap = Field(default_factory=dict)
    query: JsonMap = Field(default_factory=dict)
    json_: JsonValue = Field(None, alias="json")
    body: str | None = None
    expect: StatusPatterns = Field(default_factory=lambda: ["2xx"])
    via: Annotated[str | None, Ref("pool", "route")] = None
    idempotency_key: str | None = None

    @model_validator(mode="after")
    def _target(self) -> HttpConfig:
        if (self.url is None) == (self.connection is None):
            fail("expected exactly one of 'url' or 'connection' (with 'path')")
        if self.path is not None:
            if self.connection is None:
                fail("'path' is used only with 'connection'; with 'url', put the path in it")
            if not self.path.startswith("/") or "://" in self.path:
                fail(f"expected a path starting with '/' (relative to the connection's "
                     f"base_url), got {self.path!r}")
        if self.json_ is not None and self.body is not None:
            fail("expected either 'json' or 'body', not both")
        return self


class HttpStep(StepType):
    """Call an HTTP endpoint (SPEC §4)."""

    name = "http"
    Config = HttpConfig
