"""Inference: OpenAI-compatible clients, engine adapters, server launchers.

``backends`` never imports ``rstar2_async`` or ``sandbox``.
"""

from ._chat_client import ChatClient
from ._dispatch import Dispatcher, DispatchStatistics, NoServerUp, ServerLoad, Ticket
from ._errors import (
    BackendClosed,
    BackendError,
    BadResponse,
    LaunchError,
    RequestRejected,
    ServerDied,
    ServerError,
    ServerUnavailable,
    WeightSyncError,
)
from ._fleet import Fleet, FleetConfig, FleetServer, FleetStatistics, serve_sglang
from ._launcher import (
    VLLMServer,
    VLLMServerConfig,
    default_vllm_python,
    launch_vllm,
    serve_vllm,
)
from ._pool import ServerPool
from ._pool_server import PoolServer, PoolStatistics, ServerSpec
from ._probe import Probe, ProbeVerdict, verify_servers
from ._proxy import PROXY_LIMITS, serve_proxy
from ._protocols import ChatBackend, PauseMode, TokenBackend, WeightAdmin
from ._retry import RetryPolicy
from ._sglang import SGLangAdmin, SGLangTokenClient, sglang_command
from ._token_client import TokenClientStatistics
from ._token_ids import TokenIds
from ._transformers import TransformersBackend, TransformersStatistics
from ._transports import BroadcastTransport, DiskTransport, GlooSender, PendingWeights, VLLMNcclSender
from ._types import ChatCompletion, Completion, FinishReason, SamplingParams
from ._vllm import VLLM_WORKER_EXTENSION, VLLMAdmin, parse_vllm_metrics
from ._vllm_client import TokenClient
from ._follow import follow_versions
from ._weight_sync import SyncReport, WeightSync

__all__ = [
    "BackendClosed",
    "BackendError",
    "BadResponse",
    "BroadcastTransport",
    "ChatBackend",
    "ChatClient",
    "ChatCompletion",
    "Completion",
    "DiskTransport",
    "DispatchStatistics",
    "Dispatcher",
    "FinishReason",
    "Fleet",
    "FleetConfig",
    "FleetServer",
    "FleetStatistics",
    "GlooSender",
    "LaunchError",
    "NoServerUp",
    "PauseMode",
    "PendingWeights",
    "PoolServer",
    "PoolStatistics",
    "Probe",
    "ProbeVerdict",
    "PROXY_LIMITS",
    "RequestRejected",
    "RetryPolicy",
    "SGLangAdmin",
    "SGLangTokenClient",
    "SamplingParams",
    "ServerDied",
    "ServerError",
    "ServerLoad",
    "ServerPool",
    "ServerSpec",
    "ServerUnavailable",
    "SyncReport",
    "Ticket",
    "TokenBackend",
    "TokenClient",
    "TokenClientStatistics",
    "TokenIds",
    "TransformersBackend",
    "TransformersStatistics",
    "VLLM_WORKER_EXTENSION",
    "VLLMAdmin",
    "VLLMNcclSender",
    "VLLMServer",
    "VLLMServerConfig",
    "WeightAdmin",
    "WeightSync",
    "WeightSyncError",
    "default_vllm_python",
    "follow_versions",
    "launch_vllm",
    "parse_vllm_metrics",
    "serve_proxy",
    "serve_sglang",
    "serve_vllm",
    "sglang_command",
    "verify_servers",
]
