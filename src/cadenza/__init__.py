"""Cadenza: a local-first job scheduler and automation platform.

What plugin authors import: the step error classes that decide what happens after a
failure (docs/retries.md).
"""

from cadenza.domain.errors import Deferred, Fatal, ResourceFault, Retryable

__version__ = "0.1.0"

__all__ = ["Deferred", "Fatal", "ResourceFault", "Retryable", "__version__"]
