"""Test double: a minimal HTTP/1.1 server on anyio sockets (asyncio and trio),
for scripting misbehaving inference servers over real HTTP.

A handler gets ``(method, path, body)`` and returns ``(status, body)``; raising
:class:`DropConnection` closes the socket without an answer.  :class:`FakeRawServer`
writes raw bytes instead, so a test can stall or cut it anywhere in a response.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import h11
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskStatus
from anyio.streams.tls import TLSStream

from httpgate import serve_listeners

Handler = Callable[[str, str, bytes], Awaitable[tuple[int, bytes]]]


class DropConnection(Exception):
    """Raised by a handler to close the connection mid-request."""


async def serve_http(handler: Handler, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve on a free loopback port; ``started`` with the port once listening."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener:
        task_status.started(listener.extra(SocketAttribute.local_port))
        await serve_listeners(listener, partial(_connection, handler))


async def read_request(conn: h11.Connection, stream: ByteStream) -> tuple[h11.Request, bytes] | None:
    """The next whole request on ``stream``; None once the client has gone."""
    request, body = None, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                conn.receive_data(await stream.receive(65536))
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return None
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return None if request is None else (request, body)


async def _connection(handler: Handler, stream: SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            received = await read_request(conn, stream)
            if received is None:
                return
            request, body = received
            try:
                status, payload = await handler(request.method.decode(), request.target.decode(), body)
            except DropConnection:
                return
            headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
            try:
                await stream.send(conn.send(h11.Response(status_code=status, headers=headers)))
                await stream.send(conn.send(h11.Data(data=payload)))
                await stream.send(conn.send(h11.EndOfMessage()))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()


Answer = Callable[[ByteStream, h11.Request, bytes], Awaitable[bool]]
"""Answers one request on the stream; False closes the connection."""


class FakeRawServer:
    """An HTTP/1.1 server double on 127.0.0.1 whose ``answer`` writes raw bytes, so
    a test can stall it anywhere in a response; over TLS with ``ssl_context`` (a
    server context with its certificate loaded; ``handshake=False`` accepts the TCP
    connection and never answers the TLS handshake)."""

    def __init__(self, answer: Answer, *, ssl_context: ssl.SSLContext | None = None, handshake: bool = True) -> None:
        self.answer = answer
        self.ssl_context = ssl_context
        self.handshake = handshake
        self.connections = 0
        self.requests = 0
        self.port = 0
        self.closed = anyio.Event()  # set each time a client closes its end
        self.gone = 0  # connections whose client closed its end
        self.stalled = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener:  # closed when cancelled: no listening socket left to the garbage collector
            task_status.started()
            await serve_listeners(listener, self._connection)

    async def _connection(self, stream: ByteStream) -> None:
        self.connections += 1
        if self.ssl_context is not None:
            if not self.handshake:
                async with stream:
                    await self.stall(stream)
                return
            try:
                stream = await TLSStream.wrap(stream, server_side=True, ssl_context=self.ssl_context, standard_compatible=False)
            except BaseException as exc:  # cancelled too: no socket left to the garbage collector
                await anyio.aclose_forcefully(stream)
                if isinstance(exc, (anyio.BrokenResourceError, ssl.SSLError)):  # the client refused our certificate
                    return
                raise
        async with stream:
            while received := await read_request(h11.Connection(h11.SERVER), stream):
                # the answers are raw bytes: a fresh parser for each request
                self.requests += 1
                if not await self.answer(stream, *received):
                    return
            self._client_left()

    async def stall(self, stream: ByteStream) -> None:
        """Never answer more, until the client goes away."""
        self.stalled += 1
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
        self._client_left()

    async def wait_gone(self, n: int) -> None:
        """Until ``n`` clients in all have closed their end."""
        while self.gone < n:
            await self.closed.wait()

    def _client_left(self) -> None:
        self.gone += 1
        self.closed.set()
        self.closed = anyio.Event()


def raw_head(status: int, length: int, extra: bytes = b"") -> bytes:
    """A response's head with a ``content-length``, as raw bytes."""
    return b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n" % (status, length, extra)


STALLS = {
    "headers": b"HTTP/1.1 200 OK\r\ncontent-",
    "body": raw_head(200, 100) + b'{"results": [{"sta',
    "nothing": b"",
}
"""Where a hung server stops answering: mid-headers, mid-body (of 100 bytes promised),
before any byte."""


def hung_server(where: str, stalling: anyio.Event, *, only: bytes = b"") -> FakeRawServer:
    """A server that stalls its answer at ``where`` (:data:`STALLS`) to every request
    whose target ends with ``only``, setting ``stalling`` then, until the client goes;
    any other request is answered 404."""

    async def answer(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if not request.target.endswith(only):
            await stream.send(raw_head(404, 2) + b"{}")
            return True
        await stream.send(STALLS[where])
        stalling.set()
        await server.stall(stream)
        return False

    server = FakeRawServer(answer)
    return server


_METRICS = b'vllm:cache_config_info{kv_cache_size_tokens="131072"} 1.0\nvllm:num_requests_running 0\n'


def stalling_stream(
    events: Callable[[bytes], Awaitable[list[bytes]]], *, ssl_context: ssl.SSLContext | None = None
) -> FakeRawServer:
    """A vLLM double whose completions stream ``await events(body)`` (server-sent
    events, each its own HTTP chunk) and then stall until the client goes, unless
    they end with ``data: [DONE]`` (then the answer ends there).  ``/metrics``
    answers a KV capacity; anything else 404."""

    async def answer(stream: ByteStream, request: h11.Request, body: bytes) -> bool:
        if request.target.endswith(b"/metrics"):
            await stream.send(raw_head(200, len(_METRICS)) + _METRICS)
            return True
        if not request.target.endswith(b"/completions"):
            await stream.send(raw_head(404, 2) + b"{}")
            return True
        parts = await events(body)
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for event in parts:
            await stream.send(b"%x\r\n%s\r\n" % (len(event), event))
        if parts and parts[-1].startswith(b"data: [DONE]"):
            await stream.send(b"0\r\n\r\n")
            return True
        await server.stall(stream)
        return False

    server = FakeRawServer(answer, ssl_context=ssl_context)
    return server
