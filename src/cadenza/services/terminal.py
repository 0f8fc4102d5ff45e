"""What the shells need to print outside text safely (docs/security.md, "What reaches a
terminal"): the home's redactor type, :func:`printable` and the redacting standard streams.

The CLI imports only the service layer; these are the pieces of
:mod:`cadenza.audit.terminal` and :mod:`cadenza.audit.redact` it uses at its output boundary.
"""

from __future__ import annotations

from cadenza.audit.redact import Redactor
from cadenza.audit.terminal import (
    LineSanitizer,
    SanitizingStream,
    has_controls,
    printable,
    sanitized_std_streams,
)

__all__ = [
    "LineSanitizer",
    "Redactor",
    "SanitizingStream",
    "has_controls",
    "printable",
    "sanitized_std_streams",
]
