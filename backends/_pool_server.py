"""What a :class:`backends.ServerPool` is made of and reports: its servers as it sees
them (a token client and the admin endpoints each), and its counters."""

from __future__ import annotations

from typing import Final, Literal, final

import httpx
import msgspec

from ._dispatch import DispatchStatistics
from ._sglang import SGLangAdmin, SGLangTokenClient
from ._vllm import VLLMAdmin
from ._vllm_client import TokenClient

__all__ = ["POLL_TIMEOUT_S", "Engine", "PoolServer", "PoolStatistics", "ServerSpec"]

Engine = Literal["vllm", "sglang"]

POLL_TIMEOUT_S: Final = 5.0
"""A load poll slower than this counts as a failure: a server that cannot answer
``/metrics`` in 5 s is not going to serve a turn promptly either."""


class ServerSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One server of a pool."""

    url: str
    """Server root, ``http://host:port`` or ``https://...`` (a trailing ``/v1`` is accepted)."""
    engine: Engine = "vllm"


@final
class PoolServer:
    """A server as the pool sees it: its token client and its admin endpoints.

    Owned by the pool (closed when the pool closes); the weight sync borrows them.
    """

    def __init__(self, index: int, spec: ServerSpec, client: TokenClient | SGLangTokenClient, admin_http: httpx.AsyncClient) -> None:
        self.index = index
        self.url = spec.url.rstrip("/").removesuffix("/v1")
        self.engine: Engine = spec.engine
        self.client = client
        self.admin: VLLMAdmin | SGLangAdmin = VLLMAdmin(admin_http) if spec.engine == "vllm" else SGLangAdmin(admin_http)
        self._admin_http = admin_http

    def __repr__(self) -> str:
        return f"PoolServer({self.index}, {self.url!r}, {self.engine})"


class PoolStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the pool's counters and its dispatcher."""

    dispatch: DispatchStatistics
    servers_up: int
    turns: int
    """``generate`` calls that returned."""
    failovers: int
    """Requests resubmitted to another server after their server failed."""
    servers_lost: int
    """Times a server was marked down (by a failed request or poll)."""
    servers_back: int
    """Times a server came back into rotation."""
    weight_version: int
    waiting: int = 0
    """Turns waiting for room (or for a server to come up) now."""
    resumed: int = 0
    """Generations a pause cut short and resumed from their tokens, over every server
    (the servers' clients' counters)."""
    interrupted: int = 0
    """Generations a pause interrupted (cut short and resumed, or frozen through a
    ``keep`` sync), over every server (the clients' counters)."""
    stalls: int = 0
    """Requests given up because their server sent no new token for ``stall_timeout_s``."""
    overdue: int = 0
    """Requests moved to another server past ``request_timeout_s`` (their server stays up)."""
    tokens_kept: int = 0
    """Tokens that failed requests had streamed, kept and continued from on another server."""
