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
    ServerDied,
    ServerError,
    ServerUnavailable,
)
from ._launcher import VLLMServer, VLLMServerConfig, default_vllm_python, launch_vllm, serve_vllm
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
    "ServerDied",
    "ServerError",
    "ServerUnavailable",
    "TokenClient",
    "VLLMServer",
    "VLLMServerConfig",
    "default_vllm_python",
    "launch_vllm",
    "serve_vllm",
]
