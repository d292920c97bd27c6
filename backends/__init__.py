"""Inference: OpenAI-compatible clients, engine adapters, server launchers.

``backends`` never imports ``rstar2_async`` or ``sandbox``.
"""

from ._errors import (
    BackendClosed,
    BackendError,
    BadResponse,
    LaunchError,
    RequestRejected,
    ServerError,
    ServerUnavailable,
)

__all__ = [
    "BackendClosed",
    "BackendError",
    "BadResponse",
    "LaunchError",
    "RequestRejected",
    "ServerError",
    "ServerUnavailable",
]
