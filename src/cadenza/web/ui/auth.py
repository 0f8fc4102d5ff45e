"""Who reads a page, and may they: the pages' counterpart of :mod:`cadenza.web.auth`.

The same sessions, CSRF token and Origin check as the API (htmx sends the token from the
``cadenza_csrf`` cookie, see static/cadenza.js). What differs is the answer without a
session: a page answers 401 with the login form (which comes back to the page after
login), an htmx request 401 with ``HX-Redirect`` to the login page. A role too low for a
page answers the 403 page; pages show only the actions their reader may take, so a 403
is a hand-made URL, not a button.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from cadenza.services.auth import Principal
from cadenza.web.auth import AtRead, require


class LoginRequired(Exception):
    """A page or a page action was requested without a valid session."""


def page_require(role: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency admitting readers whose role is ``role`` or above; without a session,
    :class:`LoginRequired` (the login form) instead of the API's 401."""
    return require(role, when_anonymous=LoginRequired, name="page_require")


PageViewer = Annotated[Principal, Depends(page_require("viewer"))]
PageViewerAtRead = Annotated[AtRead, Depends(require("viewer", when_anonymous=LoginRequired,
                                                      name="page_require", at_read=True))]
"""A page's viewer checked with the page's hot read (:class:`~cadenza.web.auth.AtRead`)."""
PageOperator = Annotated[Principal, Depends(page_require("operator"))]
PageEditor = Annotated[Principal, Depends(page_require("editor"))]
PageAdmin = Annotated[Principal, Depends(page_require("admin"))]
