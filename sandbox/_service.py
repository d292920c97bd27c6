"""``SandboxService``: the pool behind a small HTTP/1.1 server (h11 on anyio sockets).

Endpoints (JSON bodies, msgspec):

    POST /v1/run     RunRequest                -> ExecResult
    POST /v1/batch   BatchRequest {"calls"}    -> BatchResponse {"results"} (same order)
    GET  /health     {"status": "ok", "workers_alive", "queue_depth", "layers"}
    GET  /metrics    Prometheus text: queue depth, calls by status, latency histogram

Listens on 127.0.0.1 unless told otherwise: anyone who can reach the port can
run code (in the jail).  Keep-alive connections; one request at a time per
connection; a batch runs its calls concurrently through the pool's FIFO queue.
"""

from __future__ import annotations

import bisect
import time
from typing import final

import anyio
import h11
import msgspec
from anyio.abc import SocketStream, TaskStatus

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


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@final
class SandboxService:
    """Serves ``pool`` over HTTP.  Does not own the pool (the caller opens and closes it).

    Args:
        pool: an open pool.
        host: address to bind; 127.0.0.1 by default (loopback only).
        port: 0 picks a free port (reported through ``task_status``).
        max_body_bytes: larger request bodies are answered 413.
    """

    def __init__(self, pool: SandboxPool, host: str = "127.0.0.1", port: int = 8089, max_body_bytes: int = 64 << 20) -> None:
        self.pool = pool
        self.host, self.port = host, port
        self.max_body_bytes = max_body_bytes
        self._latency_counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self._latency_sum = 0.0
        self._requests = 0

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until cancelled.  ``task_status.started(port)`` once listening.

        Raises:
            OSError: the address cannot be bound.
        """
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port, reuse_port=False)
        async with listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            task_status.started(port)
            await listener.serve(self._connection)

    # -- HTTP ----------------------------------------------------------------------
    async def _connection(self, stream: SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)
        async with stream:
            while True:
                try:
                    request, body = await self._read_request(conn, stream)
                except (anyio.EndOfStream, anyio.BrokenResourceError, h11.RemoteProtocolError, ConnectionError):
                    return
                if request is None:
                    return
                try:
                    status, ctype, payload = await self._dispatch(request, body)
                except _HTTPError as e:
                    status, ctype, payload = e.status, b"application/json", _encode({"error": str(e)})
                headers = [(b"content-type", ctype), (b"content-length", str(len(payload)).encode())]
                try:
                    await stream.send(conn.send(h11.Response(status_code=status, headers=headers)))
                    await stream.send(conn.send(h11.Data(data=payload)))
                    await stream.send(conn.send(h11.EndOfMessage()))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                    return
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return

    async def _read_request(self, conn: h11.Connection, stream: SocketStream) -> tuple[h11.Request | None, bytes]:
        request = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive(65536) if conn.their_state is not h11.DONE else b""
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body_bytes:
                    raise h11.RemoteProtocolError("body too large")
            elif isinstance(event, h11.EndOfMessage):
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None, b""

    async def _dispatch(self, request: h11.Request, body: bytes) -> tuple[int, bytes, bytes]:
        self._requests += 1
        method, path = request.method, request.target.split(b"?", 1)[0]
        if path == b"/v1/run" and method == b"POST":
            call = self._decode(_decode_run, body)
            return 200, b"application/json", _encode(await self._run(call))
        if path == b"/v1/batch" and method == b"POST":
            batch = self._decode(_decode_batch, body)
            if len(batch.calls) > MAX_BATCH:
                raise _HTTPError(413, f"batch of {len(batch.calls)} calls; at most {MAX_BATCH}")
            limit = self.pool.config.max_timeout_s
            for i, call in enumerate(batch.calls):
                if not 0 < call.timeout <= limit:
                    raise _HTTPError(400, f"calls[{i}].timeout: expected 0 < timeout <= {limit}, got {call.timeout}")
            results: list[ExecResult | None] = [None] * len(batch.calls)

            async def one(i: int, call: RunRequest) -> None:
                results[i] = await self._run(call)

            async with anyio.create_task_group() as tg:
                for i, call in enumerate(batch.calls):
                    tg.start_soon(one, i, call)
            return 200, b"application/json", _encode(BatchResponse(results))  # type: ignore[arg-type]
        if path == b"/health" and method == b"GET":
            s = self.pool.statistics()
            return 200, b"application/json", _encode(
                {"status": "ok" if s.state == "open" else s.state, "workers": s.workers,
                 "workers_alive": s.workers_alive, "queue_depth": s.queue_depth, "layers": s.layers}
            )
        if path == b"/metrics" and method == b"GET":
            return 200, b"text/plain; version=0.0.4", self.metrics_text().encode()
        raise _HTTPError(404, f"no route for {method.decode()} {path.decode(errors='replace')}")

    @staticmethod
    def _decode(decoder, body: bytes):  # type: ignore[no-untyped-def]
        try:
            return decoder(body)
        except msgspec.DecodeError as e:
            raise _HTTPError(400, f"bad request body: {e}") from e

    async def _run(self, call: RunRequest) -> ExecResult:
        t0 = time.monotonic()
        try:
            result = await self.pool.run(call.code, call.stdin, call.timeout)
        except ValueError as e:
            raise _HTTPError(400, str(e)) from e
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
