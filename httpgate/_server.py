"""``HTTPServer``: a small HTTP/1.1 server (h11 on anyio sockets) with a shared secret and limits.

The sandbox service and the fleet's authenticating proxy put their routes behind it.  Why not hypercorn or uvicorn: both would still leave the
secret, the body and batch caps and the connection cap to us, add an ASGI layer
and a dependency, and neither runs the same code on trio and asyncio as this one
does; what they add over h11 is the connection loop below.

Covered, per connection:

- ``authorization: Bearer <secret>`` on every route (constant-time compare); a
  request without it is answered 401 before its body is read, and the
  connection closed;
- headers larger than ``max_header_bytes`` -> 431, a body larger than
  ``max_body_bytes`` -> 413 (by ``content-length`` before reading it, or as it
  streams), each with a JSON body ``{"error": ...}``, then the connection closes;
- ``idle_timeout_s`` for the first byte of a request (keep-alive or new),
  ``read_timeout_s`` from that byte to the end of its body (408 if a part came),
  and ``read_timeout_s`` to send a response: a client that sends half a request
  or stops reading cannot hold a connection slot, and holds no worker, since the
  handler only runs on a whole request;
- with ``cancel_abandoned``: a client that closes its connection while its
  request is handled or answered cancels the handler (and closes a streamed
  answer's source), e.g. the proxy's request to an engine still generating, the
  sandbox service's batch still queued;
- a handler (or a streamed answer's source) that raises anything but
  :class:`HTTPError`: logged with its traceback, answered 500 if nothing was sent
  yet, else the connection is cut; the other connections are served on;
- at most ``max_connections`` at once: the next one is answered 503 and closed;
- :meth:`HTTPServer.shutdown`: stop listening (new connections are refused),
  close idle connections, let requests in flight be answered (then close their
  connection), and cancel what is left after ``shutdown_grace_s``.

Responses are whole (``content-length``) or streamed (``HTTPResponse.stream``,
chunked: the fleet's proxy relays server-sent events so).

Not covered: TLS (put the service on a private network or behind a TLS proxy),
HTTP/2, pipelined requests beyond one at a time.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import final

import anyio
import h11
import msgspec
from anyio.abc import SocketStream, TaskGroup, TaskStatus

from ._accept import serve_listeners
from ._secret import check_bind

_encode = msgspec.json.Encoder().encode
log = logging.getLogger("httpgate")


class HTTPLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Per-connection limits of :class:`HTTPServer`."""

    max_body_bytes: int = 64 << 20
    """Largest request body; larger is a 413."""
    max_header_bytes: int = 64 << 10
    """Largest request line + headers; larger is a 431."""
    max_connections: int = 512
    """Connections served at once; one more is answered 503 and closed."""
    read_timeout_s: float = 30.0
    """From a request's first byte to its last, and to send a response."""
    idle_timeout_s: float = 120.0
    """How long a connection may wait for the first byte of its next request."""
    shutdown_grace_s: float = 30.0
    """How long :meth:`HTTPServer.shutdown` lets requests in flight run before cancelling them."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_header_bytes", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"limits.{name}: expected int >= 1, got {getattr(self, name)!r}")
        for name in ("read_timeout_s", "idle_timeout_s", "shutdown_grace_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"limits.{name}: expected float > 0, got {getattr(self, name)!r}")


class HTTPRequest(msgspec.Struct, frozen=True):
    """A whole request, as the handler gets it."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def path(self) -> bytes:
        return self.target.split(b"?", 1)[0]


class HTTPResponse(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    content_type: bytes = b"application/json"
    stream: AsyncIterator[bytes] | None = None
    """Instead of ``body``: parts sent as they come (chunked), and closed by the
    server after the last one or when the client goes.  An ``HTTPError`` or
    ``OSError`` from it ends the connection before the end of the body, so the
    client sees it cut, not complete."""


Handler = Callable[[HTTPRequest], Awaitable[HTTPResponse]]


class HTTPError(Exception):
    """Raised by a handler: answered with ``status`` and ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> HTTPResponse:
    return HTTPResponse(status, _encode({"error": message}))


class _Closing(Exception):
    """Answer ``response`` and close the connection."""

    def __init__(self, response: HTTPResponse | None) -> None:
        self.response = response


@final
class HTTPServer:
    """Serves ``handler`` on ``host:port``; see the module docstring.

    Args:
        handler: answers a whole request; may raise :class:`HTTPError`.
        secret: required as a bearer token on every request; ``None``: none.
        insecure: allow a non-loopback ``host`` without a secret.
        cancel_abandoned: watch the client while its request is handled and
            answered; if it closes its connection, cancel both.  A client that
            half-closes after its request counts as gone.

    Raises:
        ValueError: a non-loopback ``host`` without a secret, unless ``insecure``.
    """

    def __init__(
        self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0, secret: str | None = None,
        insecure: bool = False, limits: HTTPLimits | None = None, cancel_abandoned: bool = False,
    ) -> None:  # fmt: skip
        check_bind(host, secret, insecure)
        self.handler, self.host, self.port = handler, host, port
        self.cancel_abandoned = cancel_abandoned
        self.limits = limits or HTTPLimits()
        self._expected = f"Bearer {secret}".encode() if secret is not None else None
        self._tg: TaskGroup | None = None
        self._connections = 0
        self._idle: set[anyio.CancelScope] = set()
        self._stopping = False
        self._listening: anyio.CancelScope | None = None
        self._not_listening = anyio.Event()
        self.refused = 0
        """Connections answered 503 because ``max_connections`` were open."""

    @property
    def connections(self) -> int:
        return self._connections

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled or shut down; ``task_status.started(port)`` once listening.

        Raises:
            OSError: the address cannot be bound.
        """
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                with anyio.CancelScope() as self._listening:
                    async with listener:
                        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
                        await serve_listeners(listener, self._connection, tg)
            finally:
                self._not_listening.set()

    async def shutdown(self) -> None:
        """Refuse new connections, close idle ones, answer requests in flight; :meth:`serve`
        returns once they are answered (cancelled after ``shutdown_grace_s``).  Returns once
        the port is closed."""
        self._stopping = True
        if self._listening is not None:
            self._listening.cancel()
        for scope in self._idle:
            scope.cancel()
        if self._tg is not None:
            self._tg.cancel_scope.deadline = min(
                self._tg.cancel_scope.deadline, anyio.current_time() + self.limits.shutdown_grace_s
            )
            await self._not_listening.wait()

    # -- one connection ---------------------------------------------------------
    async def _connection(self, stream: SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        async with stream:
            if self._connections >= self.limits.max_connections:
                self.refused += 1
                await self._send_closing(
                    stream, _error(503, f"too many connections (at most {self.limits.max_connections})")
                )
                return
            self._connections += 1
            try:
                await self._serve_connection(conn, stream)
            except Exception:  # a bug of ours: it ends this connection, never the listener's task group
                log.exception("a connection failed")
            finally:
                self._connections -= 1

    async def _serve_connection(self, conn: h11.Connection, stream: SocketStream) -> None:
        while not self._stopping:
            try:
                request = await self._read_request(conn, stream)
            except _Closing as closing:
                if closing.response is not None:
                    await self._send_closing(stream, closing.response)
                return
            if not await self._answer(conn, stream, request):
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _answer(self, conn: h11.Connection, stream: SocketStream, request: HTTPRequest) -> bool:
        """Handle ``request`` and send the answer; False: the connection must close."""
        if not self.cancel_abandoned:
            return await self._handle_and_send(conn, stream, request)
        sent = False
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                try:
                    data = await stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    data = b""
                if data:
                    conn.receive_data(data)  # the next request, pipelined: parsed once this one is answered
                else:
                    tg.cancel_scope.cancel()  # the client went: nobody waits for this answer

            tg.start_soon(watch)
            sent = await self._handle_and_send(conn, stream, request)
            tg.cancel_scope.cancel()
        return sent

    async def _handle_and_send(self, conn: h11.Connection, stream: SocketStream, request: HTTPRequest) -> bool:
        try:
            response = await self.handler(request)
        except HTTPError as e:
            response = _error(e.status, str(e))
        except Exception:
            log.exception("handler failed on %s %s", request.method.decode(errors="replace"), _shown(request.target))
            response = _error(500, "internal server error (logged)")
        return await self._send(conn, stream, response, close=self._stopping)

    async def _read_request(self, conn: h11.Connection, stream: SocketStream) -> HTTPRequest:
        """Raises: _Closing (with the answer to give, if any)."""
        limits = self.limits
        started = False
        head: h11.Request | None = None
        body = bytearray()
        with anyio.CancelScope(deadline=anyio.current_time() + limits.idle_timeout_s) as scope:
            self._idle.add(scope)
            try:
                while True:
                    try:
                        event = conn.next_event()
                    except h11.RemoteProtocolError as e:
                        status = 431 if "incomplete event" in str(e) else e.error_status_hint
                        raise _Closing(_error(status, f"bad request: {e}")) from None
                    if event is h11.NEED_DATA:
                        try:
                            data = await stream.receive(65536)
                        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                            data = b""
                        if not started and data:
                            started = True
                            self._idle.discard(scope)
                            scope.deadline = anyio.current_time() + limits.read_timeout_s
                        conn.receive_data(data)
                    elif isinstance(event, h11.Request):
                        head = event
                        self._check_head(event)
                    elif isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > limits.max_body_bytes:
                            raise _Closing(_error(413, f"request body over {limits.max_body_bytes} bytes"))
                    elif isinstance(event, h11.EndOfMessage):
                        assert head is not None
                        return HTTPRequest(head.method, head.target, list(head.headers), bytes(body))
                    else:  # ConnectionClosed, PAUSED
                        raise _Closing(None)
            finally:
                self._idle.discard(scope)
        # the deadline passed (or shutdown closed an idle connection)
        raise _Closing(_error(408, f"request not received within {limits.read_timeout_s:g} s") if started else None)

    def _check_head(self, head: h11.Request) -> None:
        # h11 caps only a head still incomplete in its buffer; one that came whole is checked here.
        size = len(head.target) + sum(len(k) + len(v) + 4 for k, v in head.headers)
        if size > self.limits.max_header_bytes:
            raise _Closing(_error(431, f"request head of {size} bytes; at most {self.limits.max_header_bytes}"))
        headers = dict(head.headers)
        if self._expected is not None and not hmac.compare_digest(headers.get(b"authorization", b""), self._expected):
            raise _Closing(_error(401, "missing or wrong secret: send `authorization: Bearer <secret>`"))
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            raise _Closing(_error(413, f"request body of {int(length)} bytes; at most {self.limits.max_body_bytes}"))

    async def _send(self, conn: h11.Connection, stream: SocketStream, response: HTTPResponse, *, close: bool) -> bool:
        """Send ``response``; False if the client is gone or too slow to read it."""
        if response.stream is not None:
            return await self._send_stream(conn, stream, response, close=close)
        headers = [(b"content-type", response.content_type), (b"content-length", str(len(response.body)).encode())]
        if close:
            headers.append((b"connection", b"close"))
        # One write for head, body and end: a send per part costs a syscall and a
        # scheduling round each, and the client as many reads.
        head = conn.send(h11.Response(status_code=response.status, headers=headers))
        body = conn.send(h11.Data(data=response.body))
        return await self._send_part(stream, b"".join((head, body, conn.send(h11.EndOfMessage()))))  # type: ignore[arg-type]

    async def _send_stream(
        self, conn: h11.Connection, stream: SocketStream, response: HTTPResponse, *, close: bool
    ) -> bool:
        """Send a streamed ``response`` part by part (h11 frames it chunked, having no
        length); each part, not the whole, must go within ``read_timeout_s``."""
        assert response.stream is not None
        headers = [(b"content-type", response.content_type)] + ([(b"connection", b"close")] if close else [])
        try:
            if not await self._send_part(stream, conn.send(h11.Response(status_code=response.status, headers=headers))):
                return False
            async for part in response.stream:
                if part and not await self._send_part(stream, conn.send(h11.Data(data=part))):
                    return False
            return await self._send_part(stream, conn.send(h11.EndOfMessage()))
        except (HTTPError, OSError):
            return False  # the source failed mid-way: cut the connection
        except Exception:
            log.exception("streamed answer failed mid-way")
            return False  # the head went with a status: all that is left is to cut the connection
        finally:
            aclose = getattr(response.stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _send_part(self, stream: SocketStream, data: bytes | None) -> bool:
        with anyio.move_on_after(self.limits.read_timeout_s):
            try:
                await stream.send(data or b"")
                return True
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return False
        return False

    async def _send_closing(self, stream: SocketStream, response: HTTPResponse) -> None:
        """Send an error ``response`` and close, whatever state the request is in (h11
        sends no response to a request it has not parsed)."""
        head = (
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Error')}\r\n"
            f"content-type: {response.content_type.decode()}\r\ncontent-length: {len(response.body)}\r\n"
            "connection: close\r\n\r\n"
        )
        with anyio.move_on_after(self.limits.read_timeout_s):
            try:
                await stream.send(head.encode() + response.body)
                # Read (and drop) what the client is still sending: closing on unread
                # data resets the connection, and the client may never see the answer.
                await stream.send_eof()
                with anyio.move_on_after(1.0):
                    for _ in range(64):
                        await stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass


def _shown(target: bytes) -> str:
    """A request's target for the log: its path only (a query may carry data)."""
    return target.split(b"?", 1)[0][:200].decode(errors="replace")


_REASONS = {400: "Bad Request", 401: "Unauthorized", 408: "Request Timeout", 413: "Content Too Large",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}  # fmt: skip
