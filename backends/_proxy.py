"""``serve_proxy``: the authenticating front of a fleet server.

vLLM's ``--api-key`` guards only its ``/v1`` routes; the dev-mode routes the weight
sync needs (``/pause``, ``/collective_rpc`` with ``reload_weights`` from any path,
``/update_weights``, ...) and ``/metrics`` stay open to anyone who reaches the
port.  So a fleet with a secret binds each engine to loopback (on a port of its
own, with ``VLLM_API_KEY`` set, so ``/v1`` asks for the secret there too) and
puts this proxy on the public address: every route, whatever the engine serves,
needs ``authorization: Bearer <secret>`` (401 otherwise, see
:class:`httpgate.HTTPServer`), and a request that has it is forwarded as is.

An answer without a length (chunked: ``stream=true`` completions, server-sent
events) is relayed part by part as the engine sends it; one with a length is
relayed whole.  A relay the engine cuts is cut for the client too.  A client that
goes away abandons its request: the proxy closes the engine's connection, and
vLLM aborts a request whose connection closes (its generation stops).  Upstream,
:class:`httpgate.Http11Transport` (not httpcore, whose shielded close can hang
forever, see ``httpgate/_client.py``).

Not covered: a vLLM engine's loopback port asks for the secret only on ``/v1``
(an SGLang engine's on every route but ``/health`` and ``/metrics``), so other
users of its node can reach its dev-mode routes there.
"""

from __future__ import annotations

from typing import Final, final

import anyio
import httpx
from anyio.abc import TaskStatus

from httpgate import HTTPError, HTTPLimits, HTTPRequest, HTTPResponse, HTTPServer, transport_for

__all__ = ["PROXY_LIMITS", "serve_proxy"]

PROXY_LIMITS: Final = HTTPLimits(
    max_body_bytes=256 << 20, max_connections=16384, read_timeout_s=300.0, idle_timeout_s=3600.0, shutdown_grace_s=5.0
)
"""A pool keeps up to 4096 connections per server open, mostly idle between
turns; weight-update requests carry every tensor's name and shape."""

_UPSTREAM_TIMEOUT: Final = httpx.Timeout(3600.0, connect=5.0, pool=60.0)
"""Reading the engine's answer (or its next part) may take as long as the token
clients allow a turn (``Http11Transport``'s default): a long generation is not a
hung engine; a client that gives up earlier ends the wait by going away."""

# Hop-by-hop headers and the ones httpx sets itself from the forwarded body.
_DROP: Final = frozenset(
    {b"host", b"connection", b"keep-alive", b"content-length", b"transfer-encoding", b"te", b"upgrade"}
)


async def serve_proxy(
    upstream: str, *, host: str, port: int, secret: str | None, insecure: bool = False,
    limits: HTTPLimits = PROXY_LIMITS, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:  # fmt: skip
    """Forward authenticated requests on ``host:port`` to ``upstream`` until cancelled;
    ``task_status.started(port)`` once listening.  An unreachable upstream is a 502.

    Raises:
        ValueError: a non-loopback ``host`` without a secret, unless ``insecure``.
        OSError: the address cannot be bound.
    """
    transport = transport_for(upstream, timeout=_UPSTREAM_TIMEOUT, max_connections=limits.max_connections)
    async with httpx.AsyncClient(
        base_url=upstream, transport=transport, timeout=_UPSTREAM_TIMEOUT, trust_env=False
    ) as http:

        async def forward(request: HTTPRequest) -> HTTPResponse:
            headers = [(k, v) for k, v in request.headers if k.lower() not in _DROP]
            outbound = http.build_request(
                request.method.decode(), request.target.decode(), headers=headers, content=request.body
            )
            try:
                answer = await http.send(outbound, stream=True)
            except httpx.HTTPError as e:
                raise HTTPError(502, f"engine at {upstream} unreachable: {type(e).__name__}: {e}") from e
            content_type = answer.headers.get("content-type", "application/octet-stream").encode()
            if "content-length" not in answer.headers:
                return HTTPResponse(answer.status_code, b"", content_type, stream=_Relay(answer, upstream))
            try:
                content = await answer.aread()
            except httpx.HTTPError as e:
                raise _cut(upstream, e) from e
            finally:
                await answer.aclose()
            return HTTPResponse(answer.status_code, content, content_type)

        server = HTTPServer(
            forward, host=host, port=port, secret=secret, insecure=insecure, limits=limits, cancel_abandoned=True
        )
        await server.serve(task_status=task_status)


@final
class _Relay:
    """The engine's answer part by part, as it comes; the server closes it when the
    client has it all or goes away.  Not an async generator: one closed before its
    first part would skip its ``finally``, and the engine's answer (its connection,
    its generation) would stay open."""

    def __init__(self, answer: httpx.Response, upstream: str) -> None:
        self._answer = answer
        self._parts = answer.aiter_bytes()
        self._upstream = upstream

    def __aiter__(self) -> _Relay:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._parts.__anext__()
        except httpx.HTTPError as e:
            raise _cut(self._upstream, e) from e

    async def aclose(self) -> None:
        try:
            await self._parts.aclose()
        finally:
            await self._answer.aclose()


def _cut(upstream: str, e: httpx.HTTPError) -> HTTPError:
    """The 502 for an engine's answer that was cut or is not decodable (its content-encoding)."""
    return HTTPError(502, f"engine at {upstream}: answer cut or undecodable: {type(e).__name__}: {e}")
