"""The fleet's authenticating proxy (backends/_proxy.py) in front of a raw engine
double: streamed (chunked, server-sent events) answers are relayed part by part."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import anyio
import h11
import httpx
import pytest
from anyio.abc import SocketStream, TaskGroup

from backends import serve_proxy
from backends._proxy import _Relay
from rstar2_async.testing import FakeRawServer

pytestmark = pytest.mark.anyio


async def _proxy_for(engine: FakeRawServer, tg: TaskGroup, secret: str | None = None) -> int:
    """Start ``engine`` and a proxy in front of it in ``tg``: the proxy's port."""
    await tg.start(engine.serve)
    upstream = f"http://127.0.0.1:{engine.port}"
    return await tg.start(functools.partial(serve_proxy, upstream, host="127.0.0.1", port=0, secret=secret))


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def test_a_streamed_answer_reaches_the_client_part_by_part() -> None:
    """The engine sends its first event, then waits until the client has it before
    it sends the last: a proxy that buffered the answer would never deliver it."""
    client_has_first = anyio.Event()

    async def events(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await stream.send(_chunk(b"data: first\n\n"))
        await client_has_first.wait()
        await stream.send(_chunk(b"data: last\n\ndata: ["))
        await stream.send(_chunk(b"DONE]\n\n") + _chunk(b""))
        return True

    engine = FakeRawServer(events)
    async with anyio.create_task_group() as tg:
        port = await _proxy_for(engine, tg, secret="k")
        parts: list[bytes] = []
        with anyio.fail_after(20):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                headers = {"authorization": "Bearer k"}
                async with http.stream("POST", "/v1/completions", json={"stream": True}, headers=headers) as response:
                    assert response.headers["content-type"] == "text/event-stream"
                    async for part in response.aiter_bytes():
                        parts.append(part)
                        client_has_first.set()
        tg.cancel_scope.cancel()
    assert parts[0] == b"data: first\n\n"
    assert b"".join(parts) == b"data: first\n\ndata: last\n\ndata: [DONE]\n\n"


async def test_an_answer_the_engine_cuts_is_cut_for_the_client() -> None:
    async def cut(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/v1/models":
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            return True
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await stream.send(_chunk(b"data: first\n\n"))
        return False  # closes mid-answer

    engine = FakeRawServer(cut)
    async with anyio.create_task_group() as tg:
        port = await _proxy_for(engine, tg)
        with anyio.fail_after(20):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                with pytest.raises(httpx.RemoteProtocolError):
                    await http.post("/v1/completions", json={"stream": True})
                assert (await http.get("/v1/models")).status_code == 200  # the proxy still serves
        tg.cancel_scope.cancel()


async def test_a_relay_closed_before_its_first_part_closes_the_engines_answer() -> None:
    """The server closes a stream it could not start sending (the client went before
    the head): the engine's answer, and with it its connection, must close too."""

    class FakeEngineStream(httpx.AsyncByteStream):
        closed = False

        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b"data: first\n\n"

        async def aclose(self) -> None:
            self.closed = True

    engine = FakeEngineStream()
    relay = _Relay(httpx.Response(200, stream=engine), "http://engine")
    await relay.aclose()
    assert engine.closed


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_client_that_goes_away_closes_the_engines_connection(streamed: bool) -> None:
    """The engine is still generating (no answer yet, or one part of a stream) when
    the client gives up: the proxy must close the engine's connection (vLLM then
    aborts the generation), not wait on for an answer nobody reads."""

    async def generating(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if streamed:
            await stream.send(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            await stream.send(_chunk(b"data: first\n\n"))
        await engine.stall(stream)
        return False

    engine = FakeRawServer(generating)
    async with anyio.create_task_group() as tg:
        port = await _proxy_for(engine, tg)
        closed = engine.closed
        with anyio.fail_after(20):  # a bound: a proxy that waits on would hang the test, not fail it
            async with (
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
                anyio.create_task_group() as client,
            ):

                async def request() -> None:
                    async with http.stream("POST", "/v1/completions", json={"stream": streamed}) as response:
                        async for _ in response.aiter_bytes():
                            client.cancel_scope.cancel()  # leaves after the first part

                client.start_soon(request)
                if not streamed:
                    while engine.stalled == 0:
                        await anyio.wait_all_tasks_blocked()
                    client.cancel_scope.cancel()
            await closed.wait()  # the engine saw the proxy's connection go
        tg.cancel_scope.cancel()
    assert engine.stalled == 1


async def test_an_answer_the_proxy_cannot_decode_is_a_502() -> None:
    """A gzip answer that is not gzip fails to decode in the proxy: a 502 for that
    client, and the proxy serves on."""

    async def garbled(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if request.target == b"/v1/models":
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        else:
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 7\r\n\r\nnot gz!")
        return True

    engine = FakeRawServer(garbled)
    async with anyio.create_task_group() as tg:
        port = await _proxy_for(engine, tg)
        with anyio.fail_after(20):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                answer = await http.post("/v1/completions", json={})
                assert answer.status_code == 502 and "DecodingError" in answer.json()["error"]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                assert (await http.get("/v1/models")).status_code == 200  # the proxy still serves
        tg.cancel_scope.cancel()
