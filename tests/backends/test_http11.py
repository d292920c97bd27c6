"""The token clients' HTTP/1.1 transport (backends/_http11.py) against raw socket
doubles: keep-alive, chunked bodies, stale idle connections, and cancellation that
always reaches a request stalled mid-headers or mid-body."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import h11
import httpx
import msgspec
import pytest
from anyio.abc import SocketStream

from backends import RetryPolicy, SamplingParams, ServerPool
from backends._http11 import Http11Transport, _host_header
from tests.fakes.http import FakeRawServer

pytestmark = pytest.mark.anyio


def _completion(body: bytes) -> bytes:
    """The vLLM double's answer: each token is its absolute position."""
    request = msgspec.json.decode(body)
    start = len(request["prompt"])
    ids = list(range(start, start + request["max_tokens"]))
    choice = {"token_ids": ids, "logprobs": {"token_logprobs": [0.0] * len(ids)}, "finish_reason": "stop"}
    return msgspec.json.encode({"choices": [choice]})


def _head(status: int, length: int, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n" % (status, length, extra)


async def _plain(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
    if request.target.endswith(b"/metrics"):
        text = b'vllm:cache_config_info{kv_cache_size_tokens="100000"} 1.0\nvllm:num_requests_running 0\n'
        await stream.send(_head(200, len(text)) + text)
    elif request.target.endswith(b"/models"):
        await stream.send(_head(200, 12) + b'{"data": []}')
    else:
        answer = _completion(body)
        await stream.send(_head(200, len(answer)) + answer)
    return True


async def test_keeps_connections_alive_and_reads_chunked_bodies() -> None:
    async def chunked(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/chunked":
            await stream.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            return True
        await stream.send(_head(201, len(body)) + body)
        return True

    server = FakeRawServer(chunked)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport()
        origin = ("127.0.0.1", server.port)
        assert await transport.post(origin, b"/echo", [], b"one") == (201, b"one")
        assert await transport.post(origin, b"/chunked", [], b"") == (200, b"abcde")
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}") as client:
            response = await client.post("/echo", content=b"two")
        assert (response.status_code, response.content) == (201, b"two")
        assert server.connections == 1 and server.requests == 3
        tg.cancel_scope.cancel()


async def test_an_idle_connection_the_server_closed_is_replaced_once() -> None:
    async def once(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(_head(200, 2) + b"ok")
        return False  # closes after each answer, without saying so

    server = FakeRawServer(once)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport()
        origin = ("127.0.0.1", server.port)
        for _ in range(3):
            assert await transport.post(origin, b"/", [], b"") == (200, b"ok")
        assert server.connections == 3
        tg.cancel_scope.cancel()


async def test_errors_are_httpx_transport_errors() -> None:
    async def broken(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")
        return False

    server = FakeRawServer(broken)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport(timeout=httpx.Timeout(5.0))
        with pytest.raises(httpx.RemoteProtocolError):
            await transport.post(("127.0.0.1", server.port), b"/", [], b"")
        with pytest.raises(httpx.ConnectError):
            await transport.post(("127.0.0.1", 1), b"/", [], b"")
        assert transport._open == 0
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("where", ["headers", "body"])
async def test_cancelling_a_stalled_request_closes_its_connection_at_once(where: str) -> None:
    async def stalls(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-" if where == "headers" else _head(200, 100) + b'{"choi')
        await server.stall(stream)
        return False

    server = FakeRawServer(stalls)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport()  # a read timeout of an hour: only the cancellation ends the wait
        closed = server.closed
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as requests:
                requests.start_soon(transport.post, ("127.0.0.1", server.port), b"/", [], b"")
                await anyio.wait_all_tasks_blocked()
                assert server.stalled == 1
                scope.cancel()
        with anyio.fail_after(20):  # a bound: a socket left open would hang the test, not fail it
            await closed.wait()  # the server saw its client go
        assert transport._open == 0 and not transport._idle
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("where", ["headers", "body"])
async def test_turns_stalled_on_a_hung_server_fail_over_and_all_finish(where: str) -> None:
    """Many trajectories at once through a server that stalls every other answer
    mid-way (headers or body) and keeps coming back, beside a healthy one: each
    stalled turn is cancelled by the pool's request timeout, fails over and
    finishes; none stays stuck in the client past its cancellation (httpx's default
    transport lost turns here: a shielded close waiting on a lock wake-up that
    anyio's asyncio Lock lost, see backends/_http11.py)."""
    trajectories, turns = 200, 3

    async def hangs(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if not request.target.endswith(b"/completions") or hung.requests % 2:
            return await _plain(stream, request, body)
        answer = _completion(body)
        await stream.send(
            b"HTTP/1.1 200 OK\r\ncontent-" if where == "headers" else _head(200, len(answer)) + answer[:7]
        )
        await hung.stall(stream)
        return False

    hung, healthy = FakeRawServer(hangs), FakeRawServer(_plain)
    finished: list[list[int]] = []
    async with anyio.create_task_group() as tg:
        await tg.start(hung.serve)
        await tg.start(healthy.serve)
        urls = [f"http://127.0.0.1:{hung.port}", f"http://127.0.0.1:{healthy.port}"]
        async with ServerPool(
            urls, model="m", poll_interval_s=0.05, request_timeout_s=2.0, max_failovers=50, policy="round_robin",
            retry=RetryPolicy(max_retries=0),
        ) as pool:  # fmt: skip

            async def trajectory(i: int) -> None:
                seq = [0, 1, 2]
                for _ in range(turns):
                    completion = await pool.generate(seq, max_tokens=4, sampling=SamplingParams(), session=i)
                    seq += completion.token_ids
                finished.append(seq)

            with anyio.fail_after(120):  # a turn stuck past its cancellation would hold this forever
                async with anyio.create_task_group() as run:
                    for i in range(trajectories):
                        run.start_soon(trajectory, i)
        tg.cancel_scope.cancel()
    assert finished == [list(range(3 + 4 * turns))] * trajectories
    assert hung.stalled >= 10


async def test_a_request_waiting_for_a_connection_takes_one_that_goes_idle() -> None:
    """At the cap, a request waits for a connection; one that goes back idle (to its
    origin or, evicted, to another) is as good as one that closes, so the wait ends
    there and not with a ``PoolTimeout``."""
    release = anyio.Event()

    async def slow(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/slow":
            await release.wait()
        await stream.send(_head(200, 2) + b"ok")
        return True

    a, b = FakeRawServer(slow), FakeRawServer(slow)
    async with anyio.create_task_group() as tg:
        await tg.start(a.serve)
        await tg.start(b.serve)
        transport = Http11Transport(timeout=httpx.Timeout(30.0, pool=5.0), max_connections=1)
        answers: list[tuple[int, bytes]] = []

        async def post(origin: tuple[str, int], target: bytes) -> None:
            answers.append(await transport.post(origin, target, [], b""))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as requests:
                requests.start_soon(post, ("127.0.0.1", a.port), b"/slow")
                await anyio.wait_all_tasks_blocked()
                requests.start_soon(post, ("127.0.0.1", a.port), b"/")  # waits for the one connection
                await anyio.wait_all_tasks_blocked()
                release.set()
            # the one connection is idle on a; b needs it closed, not a pool timeout
            assert await transport.post(("127.0.0.1", b.port), b"/", [], b"") == (200, b"ok")
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
                closed = server.closed
                async with client.stream("GET", "/stall") as response, contextlib.aclosing(response.aiter_raw()) as raw:
                    assert await raw.__anext__() == b"abc"
                await closed.wait()
        assert transport._open == 0 and server.connections == 1 and server.stalled == 1
        tg.cancel_scope.cancel()


async def _first_then(parts: AsyncIterator[bytes], event: anyio.Event) -> AsyncIterator[bytes]:
    """``parts``, setting ``event`` once the first has come (the server sends the rest then)."""
    async for part in parts:
        yield part
        event.set()


def test_an_ipv6_host_goes_in_brackets() -> None:
    """``host: ::1:8000`` is no host and port; ``[::1]:8000`` is (RFC 9110 section 7.2)."""
    assert _host_header(("::1", 8000)) == b"[::1]:8000"
    assert _host_header(("fe80::1", 80)) == b"[fe80::1]"
    assert _host_header(("127.0.0.1", 8000)) == b"127.0.0.1:8000"
    assert _host_header(("engine", 80)) == b"engine"


async def test_closing_the_transport_fails_the_requests_waiting_for_a_connection() -> None:
    """At the cap, a waiting request fails at once when the transport closes; it does
    not wait out the pool timeout (an hour here)."""
    release = anyio.Event()

    async def slow(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await release.wait()
        await stream.send(_head(200, 2) + b"ok")
        return True

    server = FakeRawServer(slow)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        transport = Http11Transport(timeout=httpx.Timeout(3600.0), max_connections=1)
        origin = ("127.0.0.1", server.port)
        failed: list[BaseException] = []

        async def waits() -> None:
            with pytest.raises(RuntimeError, match="closed while this request waited") as caught:
                await transport.post(origin, b"/", [], b"")
            failed.append(caught.value)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as requests:
                requests.start_soon(transport.post, origin, b"/", [], b"")  # holds the one connection
                await anyio.wait_all_tasks_blocked()
                requests.start_soon(waits)
                await anyio.wait_all_tasks_blocked()
                await transport.aclose()
                await anyio.wait_all_tasks_blocked()
                assert len(failed) == 1  # before the first request is answered
                release.set()
        assert transport._open == 0
        tg.cancel_scope.cancel()
