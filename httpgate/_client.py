"""``Http11Transport``: a lean HTTP/1.1 client transport (h11 over anyio sockets, TLS
over anyio's ``TLSStream`` for ``https://``) for our services: the inference servers
(token and chat clients, the pool's admin calls, the fleet's proxy and health
checks) and the sandbox service (``sandbox.SandboxClient``).

Why not httpx's default transport (httpcore): under load and cancellation a turn
could stay stuck forever past the pool's ``request_timeout_s``.  httpcore closes a
response in a shielded scope that takes the connection's ``_state_lock``, an
``anyio.Lock``; anyio's asyncio Lock (< 4.14, agronholm/anyio#1145) loses the
wake-up of a waiter that queued behind a cancelled one, and the shield keeps any
cancellation from ending that wait (``benchmarks/pool_chaos.py`` at concurrency
128 lost 15-17 of 2,000 trajectories that way).  Here nothing awaits under a
shield and no lock is held across an await: a connection belongs to one request
from checkout to return, and any error or cancellation during the exchange closes
its socket at once (the close itself is synchronous on both backends).  Over TLS
the same: a connection is closed without the TLS closing handshake (nothing to
wait for), and the handshake itself is part of the connect timeout.

Also the hot path's CPU: :meth:`Http11Transport.post` skips httpx's request and
response models (``backends.CompletionClient`` uses it), and hands a streamed
answer's body to its reader part by part as it arrives.  Through
:meth:`handle_async_request` the same transport serves an ``httpx.AsyncClient``
(everything else), the answer's body streamed.

Covered: ``http`` and ``https`` (certificates checked as httpx checks them: its
CA bundle, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``; or the ``ssl_context`` given),
keep-alive reuse, ``content-length`` and chunked bodies, connect / read /
write / pool timeouts (``httpx.Timeout``), a cap on open connections.  A request
whose reused idle connection turns out closed by the server before any answer
(a keep-alive timeout, a restart) is sent again on the next one, idle or new,
each stale one discarded; on a new connection nothing is retried.  The server
may have read a request it then dropped unanswered: for completions a second
generation is only wasted work.  Not covered: proxies, HTTP/2, streamed request bodies.
Errors are httpx's (``httpx.ConnectError``, ``ReadTimeout``, ...), so callers
translate them as before.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from typing import Final, final

import anyio
import h11
import httpx

from ._connect import Connection, Origin, connect, host_header, origin_of

__all__ = ["Http11Transport", "transport_for"]

_CHUNK: Final = 65536


class _StaleConnection(Exception):
    """A reused connection was closed by the server before any answer came."""


@final
class Http11Transport(httpx.AsyncBaseTransport):
    """Connections to any number of ``http://`` and ``https://`` origins, kept
    alive between requests.

    Args:
        timeout: connect / read / write / pool timeouts for :meth:`post`; an
            ``httpx.AsyncClient``'s requests carry their own.
        ssl_context: for ``https://`` origins; default: httpx's (its CA bundle,
            or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once per process.
        max_connections: open connections at most, all origins together; a request
            beyond waits up to the pool timeout for one to close or go idle (an idle
            one to another origin is closed to make room).

    Resource handling: each request owns its connection until its response is
    read whole (or, through an ``httpx.AsyncClient``, closed); it then goes back to the idle list, or is closed when the
    exchange failed, was cancelled, or the server asked to close.  ``aclose``
    closes the idle ones.  Cancellation is safe at any point and is never
    delayed: the socket of an interrupted exchange is closed without waiting.
    """

    def __init__(
        self, *, timeout: httpx.Timeout | None = None, max_connections: int = 4096, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.timeout = timeout or httpx.Timeout(3600.0, connect=10.0, pool=60.0)
        self.max_connections = max_connections
        self.ssl_context = ssl_context
        self._idle: dict[Origin, list[Connection]] = {}
        self._open = 0
        self._freed: anyio.Event | None = None  # made by the first request waiting at the cap
        self._closed = False

    # -- the hot path ---------------------------------------------------------------

    async def post(
        self,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        on_part: Callable[[bytes], object] | None = None,
    ) -> tuple[int, bytes]:
        """POST ``body`` to ``url``: ``(status, content)``.  With ``on_part``, a 2xx
        answer's body goes to it part by part as it arrives (``content`` is then
        empty); whatever ``on_part`` raises ends the exchange (its connection
        closed) and propagates.

        Raises:
            httpx.TransportError: connect / read / write / pool errors and timeouts,
                or a malformed answer (``httpx.RemoteProtocolError``).
        """
        status, _, content = await self._exchange(origin_of(url), b"POST", url.raw_path, headers, body, self.timeout, on_part)
        return status, content

    # -- as an httpx transport ------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The response as soon as its head is in; its body streams and its
        connection stays this request's until the body is read whole or the response
        is closed (closed early, the connection is closed, not reused)."""
        url = request.url
        timeout = request.extensions.get("timeout")
        t = httpx.Timeout(**timeout) if isinstance(timeout, dict) else self.timeout
        body = await request.aread()
        headers = [
            (k, v)
            for k, v in request.headers.raw
            if k.lower() not in (b"host", b"content-length", b"transfer-encoding")
        ]
        connection, status, rheaders = await self._start(origin_of(url), request.method, url.raw_path, headers, body, t)
        return httpx.Response(
            status, headers=rheaders, stream=_Body(self, connection, t), extensions={"http_version": b"HTTP/1.1"}
        )

    async def aclose(self) -> None:
        """Close the idle connections; requests waiting at the cap fail at once
        (``RuntimeError``), those under way close theirs when they end.  Cancelled,
        it still closes every idle connection, then raises the cancellation."""
        self._closed = True
        self._wake()
        idle, self._idle = self._idle, {}
        cancelled: BaseException | None = None
        for connection in [c for connections in idle.values() for c in connections]:
            try:
                await self._discard(connection)
            except BaseException as exc:  # noqa: PERF203 - the socket closed before the await was cancelled
                cancelled = cancelled or exc
        if cancelled is not None:
            raise cancelled

    # -- one exchange -----------------------------------------------------------------

    async def _exchange(
        self, origin: Origin, method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes,
        timeout: httpx.Timeout, on_part: Callable[[bytes], object] | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:  # fmt: skip
        connection, status, rheaders = await self._start(origin, method, target, headers, body, timeout)
        chunks = []
        if status >= 300:
            on_part = None  # an error's body is read whole, for its message
        try:
            while (part := await self._next_part(connection, timeout)) is not None:
                if on_part is None:
                    chunks.append(part)
                else:
                    on_part(part)
        except BaseException:
            await self._discard(connection)  # cancelled or failed mid-body: its state is unknown
            raise
        await self._release(connection)
        return status, rheaders, b"".join(chunks)

    async def _start(
        self, origin: Origin, method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes,
        timeout: httpx.Timeout,
    ) -> tuple[Connection, int, list[tuple[bytes, bytes]]]:  # fmt: skip
        """Send the request and read the answer's head: the connection (now the
        caller's, to :meth:`_release`), the status and the headers."""
        head = [(b"host", host_header(origin)), (b"content-length", str(len(body)).encode()), *headers]
        while True:
            connection, reused = await self._checkout(origin, timeout)
            try:
                status, rheaders = await self._send_and_read_head(
                    connection, method, target, head, body, timeout, reused
                )
            except _StaleConnection:
                await self._discard(connection)
                continue  # the server closed it while idle: again on the next one
            except BaseException:
                await self._discard(connection)  # cancelled or failed mid-exchange: its state is unknown
                raise
            return connection, status, rheaders

    async def _release(self, connection: Connection) -> None:
        """Back to the idle list if its exchange is complete and may go on; else closed."""
        h = connection.h11
        if h.our_state is h11.DONE and h.their_state is h11.DONE and not self._closed:
            h.start_next_cycle()
            self._idle.setdefault(connection.origin, []).append(connection)
            self._wake()  # a request waiting at the cap can take it (or close it for its origin)
        else:
            await self._discard(connection)

    async def _send_and_read_head(
        self, connection: Connection, method: bytes, target: bytes, head: list[tuple[bytes, bytes]], body: bytes,
        timeout: httpx.Timeout, reused: bool,
    ) -> tuple[int, list[tuple[bytes, bytes]]]:  # fmt: skip
        h = connection.h11
        try:
            data = h.send(h11.Request(method=method, target=target, headers=head))
            data += h.send(h11.Data(data=body)) + h.send(h11.EndOfMessage())  # type: ignore[operator]
        except h11.LocalProtocolError as exc:
            raise httpx.LocalProtocolError(str(exc)) from exc
        try:
            with anyio.fail_after(timeout.write):
                await connection.stream.send(data)
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out sending the request") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            if reused:
                raise _StaleConnection from exc
            raise httpx.WriteError(f"{type(exc).__name__}: {exc}") from exc
        received = False
        while True:
            event = _next_event(h)
            if event is h11.NEED_DATA:
                try:
                    data = await self._receive(connection, timeout)
                except httpx.ReadError:  # reset: a server that closed it while idle, on trio
                    if reused and not received:
                        raise _StaleConnection from None
                    raise
                if not data and reused and not received:
                    raise _StaleConnection
                received = True
                h.receive_data(data)
            elif isinstance(event, h11.Response):
                return event.status_code, list(event.headers)
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection without an answer")
            # h11.InformationalResponse (1xx): keep reading

    async def _next_part(self, connection: Connection, timeout: httpx.Timeout) -> bytes | None:
        """The next part of the answer's body; None at its end."""
        h = connection.h11
        while True:
            event = _next_event(h)
            if event is h11.NEED_DATA:
                h.receive_data(await self._receive(connection, timeout))
            elif isinstance(event, h11.Data):
                return bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return None
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError("the server closed the connection mid-answer")

    @staticmethod
    async def _receive(connection: Connection, timeout: httpx.Timeout) -> bytes:
        """The next bytes; ``b""`` at the end of the stream."""
        try:
            with anyio.fail_after(timeout.read):
                return await connection.stream.receive(_CHUNK)
        except anyio.EndOfStream:
            return b""
        except TimeoutError as exc:
            raise httpx.ReadTimeout("timed out waiting for the server's answer") from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc

    # -- the connections --------------------------------------------------------------

    async def _checkout(self, origin: Origin, timeout: httpx.Timeout) -> tuple[Connection, bool]:
        """An idle connection to ``origin`` (``reused`` True) or a new one."""
        if self._closed:
            raise RuntimeError("Http11Transport is closed")
        idle = self._idle.get(origin)
        if idle:
            return idle.pop(), True
        if self._open >= self.max_connections:
            try:
                with anyio.fail_after(timeout.pool):
                    while not self._closed and self._open >= self.max_connections and not self._idle.get(origin):
                        other = next((c for c in self._idle.values() if c), None)
                        if other is not None:  # idle on another origin: closing it makes room
                            await self._discard(other.pop())
                            continue
                        if self._freed is None:
                            self._freed = anyio.Event()
                        await self._freed.wait()
            except TimeoutError as exc:
                raise httpx.PoolTimeout(f"all {self.max_connections} connections busy") from exc
            if self._closed:
                raise RuntimeError("Http11Transport was closed while this request waited for a connection")
            idle = self._idle.get(origin)
            if idle:
                return idle.pop(), True
        self._open += 1  # counted before the connect, so concurrent checkouts respect the cap
        try:
            stream = await connect(origin, timeout.connect, self.ssl_context)
        except BaseException:
            self._closed_one()
            raise
        return Connection(origin, stream), False

    async def _discard(self, connection: Connection) -> None:
        self._closed_one()
        # Closes the socket at once, then returns at once (anyio closes synchronously
        # before any await; the forceful close does not wait for a graceful end).
        await anyio.aclose_forcefully(connection.stream)

    def _closed_one(self) -> None:
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        """Wake the requests waiting at the cap: a connection closed or went idle."""
        if self._freed is not None:
            self._freed.set()
            self._freed = None


def _next_event(h: h11.Connection) -> type[h11.PAUSED | h11.NEED_DATA] | h11.Event:
    try:
        return h.next_event()
    except h11.RemoteProtocolError as exc:
        raise httpx.RemoteProtocolError(str(exc)) from exc


@final
class _Body(httpx.AsyncByteStream):
    """An answer's body as it comes, for an ``httpx.AsyncClient``.  Closing it
    returns the connection (read whole) or closes it (not): a client that stops
    early, e.g. the proxy's when its own client left, closes the socket, so the
    server sees the request abandoned (vLLM aborts its generation)."""

    def __init__(self, transport: Http11Transport, connection: Connection, timeout: httpx.Timeout) -> None:
        self._transport = transport
        self._connection: Connection | None = connection
        self._timeout = timeout

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        # Not an async generator: one dropped unexhausted (httpx's own are, on a
        # decoding error) would be left for the garbage collector to finalize.
        connection = self._connection
        if connection is None:
            raise StopAsyncIteration
        try:
            part = await self._transport._next_part(connection, self._timeout)
        except BaseException:
            await self.aclose()
            raise
        if part is None:
            await self.aclose()
            raise StopAsyncIteration
        return part

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._transport._release(connection)  # closed if not read whole


def transport_for(
    base_url: str, *, timeout: httpx.Timeout | None = None, max_connections: int = 4096
) -> httpx.AsyncBaseTransport:
    """The transport for a server at ``base_url`` (``http://`` or ``https://``): ours.

    Raises:
        ValueError: another scheme.
    """
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"{base_url!r}: expected an http:// or https:// URL")
    return Http11Transport(timeout=timeout, max_connections=max_connections)
