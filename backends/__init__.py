"""Inference: OpenAI-compatible clients, engine adapters, server launchers.

``backends`` never imports ``rstar2_async`` or ``sandbox``.
"""

from ._chat_client import ChatClient
from ._errors import (
    BackendClosed,
    BackendError,
    BadResponse,
    LaunchError,
    RequestRejected,
    ServerError,
    ServerUnavailable,
)
from ._retry import RetryPolicy
from ._token_client import TokenClient
from ._types import ChatCompletion, Completion, FinishReason, SamplingParams

__all__ = [
    "BackendClosed",
    "BackendError",
    "BadResponse",
    "ChatClient",
    "ChatCompletion",
    "Completion",
    "FinishReason",
    "LaunchError",
    "RequestRejected",
    "RetryPolicy",
    "SamplingParams",
    "ServerError",
    "ServerUnavailable",
    "TokenClient",
]
