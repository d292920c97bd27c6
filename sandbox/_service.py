"""``SandboxService``: the pool behind :class:`HTTPServer` (h11 on anyio sockets; secret and limits there).

Endpoints (JSON bodies, msgspec):

    POST /v1/run     RunRequest                -> ExecResult
    POST /v1/batch   BatchRequest {"calls"}    -> BatchResponse {"results"} (same order)
    GET  /health     {"status": "ok", "workers_alive", "queue_depth", "layers"}
    GET  /metrics    Prometheus text: queue depth, calls by status, latency histogram

Listens on 127.0.0.1 unless told otherwise, and refuses another address without
a secret unless ``insecure``: anyone who can reach the port (and has the secret)
can run code (in the jail).  Keep-alive connections; one request at a time per
connection; a batch runs its calls concurrently through the pool's FIFO queue.

A request whose client closes its connection before the answer (its read timeout
passed and it retries elsewhere, it was cancelled, it exited) is cancelled
(``HTTPServer(cancel_abandoned=True)``): its queued calls leave the queue without
running, its running ones finish in their workers (bounded by their timeouts) and
their results are dropped (``SandboxPool.run``'s cancellation), so an abandoned
batch does not hold workers from the calls someone still waits for.
"""

from __future__ import annotations

import bisect
import time
from typing import final

import anyio
import msgspec
from anyio.abc import TaskStatus

from httpgate import HTTPError, HTTPLimits, HTTPRequest, HTTPResponse, HTTPServer

from ._pool import SandboxPool
from ._types import ExecResult


class RunRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """client -> service: one call (the arguments of ``Sandbox.run``)."""

    code: str
    stdin: str = ""
    timeout: float = 4.0


class BatchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """client -> service: calls run concurrently; results come back in the same order."""

    calls: list[RunRequest]


class BatchResponse(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """service -> client: ``len(results) == len(calls)``."""

    results: list[ExecResult]


_decode_run = msgspec.json.Decoder(RunRequest).decode
_decode_batch = msgspec.json.Decoder(BatchRequest).decode
_encode = msgspec.json.Encoder().encode

LATENCY_BUCKETS_S = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Histogram bounds: dense below 50 ms, where a warm pool answers most calls."""

MAX_BATCH = 4096
"""Calls per batch request; more is a 413 (a client should split)."""


@final
class SandboxService:
    """Serves ``pool`` over HTTP.  Does not own the pool (the caller opens and closes it).

    Args:
        pool: an open pool.
        host: address to bind; 127.0.0.1 by default (loopback only).
        port: 0 picks a free port (reported through ``task_status``).
        secret: every request must carry ``authorization: Bearer <secret>``.
        insecure: serve a non-loopback ``host`` without a secret.
        limits: body, header and connection caps and timeouts (see ``HTTPLimits``).
        max_batch: calls per batch request; more is a 413.

    Raises:
        ValueError: a non-loopback ``host`` without a secret, unless ``insecure``.
    """

    def __init__(
        self, pool: SandboxPool, host: str = "127.0.0.1", port: int = 8089, *, secret: str | None = None,
        insecure: bool = False, limits: HTTPLimits | None = None, max_batch: int = MAX_BATCH,
    ) -> None:  # fmt: skip
        self.pool = pool
        self.max_batch = max_batch
        self.http = HTTPServer(
            self._dispatch, host=host, port=port, secret=secret, insecure=insecure, limits=limits, cancel_abandoned=True
        )
        self._latency_counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self._latency_sum = 0.0
        self._requests = 0

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled or :meth:`shutdown`; ``task_status.started(port)`` once listening.

        Raises:
            OSError: the address cannot be bound.
        """
        await self.http.serve(task_status=task_status)

    async def shutdown(self) -> None:
        """Refuse new connections (closed when this returns), answer the calls in flight,
        then :meth:`serve` returns."""
        await self.http.shutdown()

    async def _dispatch(self, request: HTTPRequest) -> HTTPResponse:
        self._requests += 1
        method, path, body = request.method, request.path, request.body
        if path == b"/v1/run" and method == b"POST":
            call = self._decode(_decode_run, body)
            return HTTPResponse(200, _encode(await self._run(call)))
        if path == b"/v1/batch" and method == b"POST":
            batch = self._decode(_decode_batch, body)
            if len(batch.calls) > self.max_batch:
                raise HTTPError(413, f"batch of {len(batch.calls)} calls; at most {self.max_batch} (split it)")
            limit = self.pool.config.max_timeout_s
            for i, call in enumerate(batch.calls):
                if not 0 < call.timeout <= limit:
                    raise HTTPError(400, f"calls[{i}].timeout: expected 0 < timeout <= {limit}, got {call.timeout}")
            results: list[ExecResult | None] = [None] * len(batch.calls)

            async def one(i: int, call: RunRequest) -> None:
                results[i] = await self._run(call)

            async with anyio.create_task_group() as tg:
                for i, call in enumerate(batch.calls):
                    tg.start_soon(one, i, call)
            return HTTPResponse(200, _encode(BatchResponse(results)))  # type: ignore[arg-type]
        if path == b"/health" and method == b"GET":
            s = self.pool.statistics()
            return HTTPResponse(200, _encode(
                {"status": "ok" if s.state == "open" else s.state, "workers": s.workers,
                 "workers_alive": s.workers_alive, "queue_depth": s.queue_depth, "layers": s.layers}
            ))
        if path == b"/metrics" and method == b"GET":
            return HTTPResponse(200, self.metrics_text().encode(), b"text/plain; version=0.0.4")
        raise HTTPError(404, f"no route for {method.decode()} {path.decode(errors='replace')}")

    @staticmethod
    def _decode(decoder, body: bytes):  # type: ignore[no-untyped-def]
        try:
            return decoder(body)
        except msgspec.DecodeError as e:
            raise HTTPError(400, f"bad request body: {e}") from e

    async def _run(self, call: RunRequest) -> ExecResult:
        t0 = time.monotonic()
        try:
            result = await self.pool.run(call.code, call.stdin, call.timeout)
        except ValueError as e:
            raise HTTPError(400, str(e)) from e
        elapsed = time.monotonic() - t0
        self._latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, elapsed)] += 1
        self._latency_sum += elapsed
        return result

    def metrics_text(self) -> str:
        """Prometheus exposition of the pool's statistics and the call latency."""
        s = self.pool.statistics()
        lines = [
            "# TYPE sandbox_queue_depth gauge", f"sandbox_queue_depth {s.queue_depth}",
            "# TYPE sandbox_workers_alive gauge", f"sandbox_workers_alive {s.workers_alive}",
            "# TYPE sandbox_workers_busy gauge", f"sandbox_workers_busy {s.workers_busy}",
            "# TYPE sandbox_calls_total counter", f"sandbox_calls_total {s.calls}",
            "# TYPE sandbox_calls_by_status_total counter",
        ]
        for status in ("ok", "error", "timeout", "killed", "output_limit", "internal"):
            lines.append(f'sandbox_calls_by_status_total{{status="{status}"}} {s.by_status.get(status, 0)}')
        lines += [
            "# TYPE sandbox_retries_total counter", f"sandbox_retries_total {s.retries}",
            "# TYPE sandbox_worker_failures_total counter", f"sandbox_worker_failures_total {s.worker_failures}",
            "# TYPE sandbox_http_requests_total counter", f"sandbox_http_requests_total {self._requests}",
            "# TYPE sandbox_call_latency_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), self._latency_counts):
            cumulative += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            lines.append(f'sandbox_call_latency_seconds_bucket{{le="{le}"}} {cumulative}')
        lines.append(f"sandbox_call_latency_seconds_sum {self._latency_sum:.6f}")
        lines.append(f"sandbox_call_latency_seconds_count {cumulative}")
        return "\n".join(lines) + "\n"
