"""Audit: redaction of secrets, and the encrypted secret store (docs/security.md).

``Redactor`` masks secret values (raw and encoded), secret-looking keys and URL user-info
with :data:`REDACTED`; ``SecretStore`` keeps ``${secret.NAME}`` values encrypted at rest.
"""

from __future__ import annotations

from cadenza.audit.redact import REDACTED, Redactor, is_secret_key, redact_url
from cadenza.audit.secrets import SecretStore

__all__ = ["REDACTED", "Redactor", "SecretStore", "is_secret_key", "redact_url"]
