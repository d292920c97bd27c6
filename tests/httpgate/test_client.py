"""The HTTP/1.1 client transport (httpgate/_client.py) against raw socket doubles:
keep-alive, chunked bodies, stale idle connections, and cancellation that always
reaches a request stalled mid-headers or mid-body.  Every transport is closed, so
``-W error::ResourceWarning`` finds any socket the transport itself leaves open."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import cast

import anyio
import h11
import httpx
import pytest
from anyio.abc import SocketStream

from httpgate import Http11Transport
from httpgate._connect import host_header
from rstar2_async.testing import FakeRawServer, raw_head

pytestmark = pytest.mark.anyio


def url(port: int, path: str = "/") -> httpx.URL:
    return httpx.URL(f"http://127.0.0.1:{port}{path}")


async def test_keeps_connections_alive_and_reads_chunked_bodies() -> None:
    async def chunked(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/chunked":
            await stream.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            return True
        await stream.send(raw_head(201, len(body)) + body)
        return True

    server = FakeRawServer(chunked)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport()
        assert await transport.post(url(server.port, "/echo"), [], b"one") == (201, b"one")
        assert await transport.post(url(server.port, "/chunked"), [], b"") == (200, b"abcde")
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}") as client:
            response = await client.post("/echo", content=b"two")
        assert (response.status_code, response.content) == (201, b"two")
        assert server.connections == 1 and server.requests == 3
        tg.cancel_scope.cancel()


async def test_an_idle_connection_the_server_closed_is_replaced_once() -> None:
    async def once(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(raw_head(200, 2) + b"ok")
        return False  # closes after each answer, without saying so

    server = FakeRawServer(once)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport() as transport:  # closed: its last idle connection too
            for _ in range(3):
                assert await transport.post(url(server.port), [], b"") == (200, b"ok")
        assert server.connections == 3
        tg.cancel_scope.cancel()


async def test_errors_are_httpx_transport_errors() -> None:
    async def broken(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")
        return False

    server = FakeRawServer(broken)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport(timeout=httpx.Timeout(5.0)) as transport:
            with pytest.raises(httpx.RemoteProtocolError):
                await transport.post(url(server.port), [], b"")
            with pytest.raises(httpx.ConnectError):
                await transport.post(url(1), [], b"")
            with pytest.raises(httpx.UnsupportedProtocol):
                await transport.post(httpx.URL(f"ftp://127.0.0.1:{server.port}/"), [], b"")
            assert transport._open == 0
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("where", ["headers", "body"])
async def test_cancelling_a_stalled_request_closes_its_connection_at_once(where: str) -> None:
    async def stalls(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-" if where == "headers" else raw_head(200, 100) + b'{"choi')
        await server.stall(stream)
        return False

    server = FakeRawServer(stalls)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport() as transport:  # a read timeout of an hour: only the cancellation ends the wait
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as requests:
                    requests.start_soon(transport.post, url(server.port), [], b"")
                    await anyio.wait_all_tasks_blocked()
                    assert server.stalled == 1
                    scope.cancel()
            with anyio.fail_after(20):  # a bound: a socket left open would hang the test, not fail it
                await server.wait_gone(1)  # the server saw its client go, before the transport closed
            assert transport._open == 0 and not transport._idle
        tg.cancel_scope.cancel()


async def test_a_request_waiting_for_a_connection_takes_one_that_goes_idle() -> None:
    """At the cap, a request waits for a connection; one that goes back idle (to its
    origin or, evicted, to another) is as good as one that closes, so the wait ends
    there and not with a ``PoolTimeout``."""
    release = anyio.Event()

    async def slow(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/slow":
            await release.wait()
        await stream.send(raw_head(200, 2) + b"ok")
        return True

    a, b = FakeRawServer(slow), FakeRawServer(slow)
    async with anyio.create_task_group() as tg:
        await tg.start(a.serve)
        await tg.start(b.serve)
        answers: list[tuple[int, bytes]] = []
        async with Http11Transport(timeout=httpx.Timeout(30.0, pool=5.0), max_connections=1) as transport:

            async def post(target: httpx.URL) -> None:
                answers.append(await transport.post(target, [], b""))

            with anyio.fail_after(20):
                async with anyio.create_task_group() as requests:
                    requests.start_soon(post, url(a.port, "/slow"))
                    await anyio.wait_all_tasks_blocked()
                    requests.start_soon(post, url(a.port))  # waits for the one connection
                    await anyio.wait_all_tasks_blocked()
                    release.set()
                # the one connection is idle on a; b needs it closed, not a pool timeout
                assert await transport.post(url(b.port), [], b"") == (200, b"ok")
            assert answers == [(200, b"ok")] * 2 and a.connections == 1
            assert transport._open == 1
        tg.cancel_scope.cancel()


async def test_a_streamed_response_closed_early_closes_its_connection() -> None:
    """Through an ``httpx.AsyncClient`` the body streams: read whole, its connection
    is kept for the next request; closed after its first part, the connection is
    closed (the server sees the request abandoned), never reused."""
    more = anyio.Event()

    async def parts(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        if request.target == b"/stall":
            await server.stall(stream)
            return False
        await more.wait()
        await stream.send(b"2\r\nde\r\n0\r\n\r\n")
        return True

    server = FakeRawServer(parts)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport()
        with anyio.fail_after(20):
            async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}") as client:
                async with client.stream("GET", "/whole") as response:
                    received = [part async for part in _first_then(response.aiter_raw(), more)]
                assert received == [b"abc", b"de"] and transport._open == 1 and server.connections == 1
                # Its own stream, not aiter_raw(): closing that would leave httpx's inner
                # generator to the garbage collector (a ResourceWarning on trio).
                async with client.stream("GET", "/stall") as response:
                    stream = cast(httpx.AsyncByteStream, response.stream)
                    async with contextlib.aclosing(stream.__aiter__()) as raw:
                        assert await raw.__anext__() == b"abc"
                await server.wait_gone(1)
        assert transport._open == 0 and server.connections == 1 and server.stalled == 1
        tg.cancel_scope.cancel()


async def _first_then(parts: AsyncIterator[bytes], event: anyio.Event) -> AsyncIterator[bytes]:
    """``parts``, setting ``event`` once the first has come (the server sends the rest then)."""
    async for part in parts:
        yield part
        event.set()


def test_an_ipv6_host_goes_in_brackets() -> None:
    """``host: ::1:8000`` is no host and port; ``[::1]:8000`` is (RFC 9110 section 7.2)."""
    assert host_header(("http", "::1", 8000)) == b"[::1]:8000"
    assert host_header(("http", "fe80::1", 80)) == b"[fe80::1]"
    assert host_header(("http", "127.0.0.1", 8000)) == b"127.0.0.1:8000"
    assert host_header(("http", "engine", 80)) == b"engine"
    assert host_header(("https", "engine", 443)) == b"engine"
    assert host_header(("https", "engine", 80)) == b"engine:80"


async def test_closing_the_transport_fails_the_requests_waiting_for_a_connection() -> None:
    """At the cap, a waiting request fails at once when the transport closes; it does
    not wait out the pool timeout (an hour here)."""
    release = anyio.Event()

    async def slow(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await release.wait()
        await stream.send(raw_head(200, 2) + b"ok")
        return True

    server = FakeRawServer(slow)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport(timeout=httpx.Timeout(3600.0), max_connections=1)
        failed: list[BaseException] = []

        async def waits() -> None:
            with pytest.raises(RuntimeError, match="closed while this request waited") as caught:
                await transport.post(url(server.port), [], b"")
            failed.append(caught.value)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as requests:
                requests.start_soon(transport.post, url(server.port), [], b"")  # holds the one connection
                await anyio.wait_all_tasks_blocked()
                requests.start_soon(waits)
                await anyio.wait_all_tasks_blocked()
                await transport.aclose()
                await anyio.wait_all_tasks_blocked()
                assert len(failed) == 1  # before the first request is answered
                release.set()
        assert transport._open == 0
        tg.cancel_scope.cancel()


async def test_closing_the_transport_when_cancelled_still_closes_every_idle_connection() -> None:
    """An owner that closes it in a cancelled scope (no shield) leaves no socket open:
    the first close's cancellation does not skip the others (asyncio checkpoints
    after each close)."""
    both = anyio.Event()

    async def together(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if server.requests == 3:
            both.set()
        await both.wait()  # three requests in flight at once: three connections
        await stream.send(raw_head(200, 2) + b"ok")
        return True

    server = FakeRawServer(together)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport()
        with anyio.fail_after(20):
            async with anyio.create_task_group() as requests:
                for _ in range(3):
                    requests.start_soon(transport.post, url(server.port), [], b"")
            assert transport._open == 3 and server.gone == 0
            with anyio.CancelScope() as scope:
                scope.cancel()
                await transport.aclose()  # raises the cancellation on asyncio, not on trio (no checkpoint)
            await server.wait_gone(3)
        assert transport._open == 0
        tg.cancel_scope.cancel()


async def test_post_hands_a_streamed_body_over_part_by_part_as_it_arrives() -> None:
    """``on_part`` gets each part as it arrives (the server sends the second only
    once the first was handed over); an error answer is read whole instead; and
    what ``on_part`` raises ends the exchange and closes its connection."""
    seen = anyio.Event()

    async def parts(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/error":
            await stream.send(raw_head(503, 4) + b"busy")
            return True
        await stream.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await seen.wait()
        await stream.send(b"2\r\nde\r\n0\r\n\r\n")
        return True

    class Refused(Exception):
        pass

    def refuse(part: bytes) -> None:
        raise Refused(part)

    server = FakeRawServer(parts)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        got: list[bytes] = []

        def on_part(part: bytes) -> None:
            got.append(part)
            seen.set()

        async with Http11Transport() as transport:
            with anyio.fail_after(20):
                assert await transport.post(url(server.port, "/stream"), [], b"", on_part) == (200, b"")
                assert await transport.post(url(server.port, "/error"), [], b"", on_part) == (503, b"busy")
                with pytest.raises(Refused):
                    await transport.post(url(server.port, "/stream"), [], b"", refuse)
            assert got == [b"abc", b"de"] and server.connections == 1 and transport._open == 0  # kept, then closed
        tg.cancel_scope.cancel()
