"""``httpgate.HTTPServer``: the secret (401), the caps (413/431/503), the timeouts
(408 and silent close), graceful shutdown, and where secrets come from."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import httpx
import pytest

from httpgate import (
    HTTPError,
    HTTPLimits,
    HTTPRequest,
    HTTPResponse,
    HTTPServer,
    check_bind,
    read_secret,
    resolve_secret,
)

pytestmark = pytest.mark.anyio
SECRET = "s3cret-for-tests"
AUTH = {"authorization": f"Bearer {SECRET}"}


class _Echo:
    """A handler that answers the body back; ``/slow`` waits for ``release``."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.calls = 0

    async def __call__(self, request: HTTPRequest) -> HTTPResponse:
        self.calls += 1
        if request.path == b"/slow":
            self.entered.set()
            await self.release.wait()
        if request.path == b"/teapot":
            raise HTTPError(418, "no")
        return HTTPResponse(200, request.body, b"text/plain")


async def _raw(port: int, data: bytes) -> bytes:
    """Send ``data``, half-close, read until the server closes."""
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(data)
        out = b""
        with anyio.fail_after(10):
            try:
                while True:
                    out += await s.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return out


async def test_secret_is_required_on_every_route() -> None:
    handler = _Echo()
    server = HTTPServer(handler, secret=SECRET)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            missing = [await http.get(p) for p in ("/", "/health", "/v1/run", "/anything")]
            wrong = await http.post("/v1/run", content=b"x" * 100_000, headers={"authorization": "Bearer nope"})
            ok = await http.post("/v1/run", content=b"hello", headers=AUTH)
            teapot = await http.get("/teapot", headers=AUTH)
        tg.cancel_scope.cancel()
    assert [r.status_code for r in missing] == [401] * 4 and wrong.status_code == 401
    assert "secret" in wrong.json()["error"]
    assert ok.status_code == 200 and ok.content == b"hello"
    assert teapot.status_code == 418 and teapot.json() == {"error": "no"}
    assert handler.calls == 2  # the handler never saw an unauthenticated request


async def test_body_and_header_caps_answer_413_and_431() -> None:
    server = HTTPServer(_Echo(), limits=HTTPLimits(max_body_bytes=1000, max_header_bytes=2000))
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            fits = await http.post("/", content=b"x" * 1000)
            declared = await http.post("/", content=b"x" * 1001)

            async def chunks():  # no content-length: caught while it streams
                for _ in range(5):
                    yield b"y" * 400

            streamed = await http.post("/", content=chunks())
            big_headers = await http.get("/", headers={"x-pad": "z" * 3000})
        tg.cancel_scope.cancel()
    assert fits.status_code == 200
    assert declared.status_code == 413 and "1000" in declared.json()["error"]
    assert streamed.status_code == 413
    assert big_headers.status_code == 431


async def test_a_stalled_client_is_cut_off_and_frees_its_slot() -> None:
    limits = HTTPLimits(read_timeout_s=0.3, idle_timeout_s=0.3, max_connections=1)
    server = HTTPServer(_Echo(), limits=limits)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        async with await anyio.connect_tcp("127.0.0.1", port) as stalled:
            await stalled.send(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")  # 3 of 10 bytes
            with anyio.fail_after(10):
                answer = await stalled.receive()
        async with await anyio.connect_tcp("127.0.0.1", port) as idle:
            with anyio.fail_after(10):  # says nothing: closed without an answer
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await idle.receive()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            after = await http.post("/", content=b"ok")
        tg.cancel_scope.cancel()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert after.status_code == 200 and after.content == b"ok"


async def test_connections_over_the_cap_get_503() -> None:
    server = HTTPServer(_Echo(), limits=HTTPLimits(max_connections=2))
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        held = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(2)]
        with anyio.fail_after(10):
            while server.connections < 2:
                await anyio.wait_all_tasks_blocked()
        third = await _raw(port, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        for s in held:
            await s.aclose()
        tg.cancel_scope.cancel()
    assert third.startswith(b"HTTP/1.1 503 ") and b"too many connections" in third
    assert server.refused == 1


async def test_shutdown_answers_in_flight_and_refuses_new_connections() -> None:
    handler = _Echo()
    server = HTTPServer(handler)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        idle = await anyio.connect_tcp("127.0.0.1", port)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            answers: list[httpx.Response] = []

            async def slow() -> None:
                answers.append(await http.post("/slow", content=b"in flight"))

            async with anyio.create_task_group() as calls:
                calls.start_soon(slow)
                await handler.entered.wait()
                await server.shutdown()
                with pytest.raises(OSError):
                    await anyio.connect_tcp("127.0.0.1", port)
                with anyio.fail_after(10), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await idle.receive()  # the idle connection is closed at once
                handler.release.set()
        await idle.aclose()
    # serve() returned by itself: the task group exited without a cancel
    assert [(a.status_code, a.content, a.headers["connection"]) for a in answers] == [(200, b"in flight", "close")]


def test_binding_off_loopback_needs_a_secret(tmp_path, monkeypatch) -> None:
    with pytest.raises(ValueError, match="--insecure"):
        HTTPServer(_Echo(), host="0.0.0.0")
    check_bind("0.0.0.0", None, insecure=True)
    check_bind("::1", None, insecure=False)
    HTTPServer(_Echo(), host="0.0.0.0", secret=SECRET)
    announced: list[str] = []
    generated = resolve_secret(
        "0.0.0.0", file=None, env="RSTAR2_TEST_NO_SUCH_VAR", insecure=False, announce=announced.append
    )
    assert announced == [generated] and len(generated) >= 32
    assert resolve_secret("127.0.0.1", file=None, env=None, insecure=False, announce=announced.append) is None
    assert resolve_secret("0.0.0.0", file=None, env=None, insecure=True, announce=announced.append) is None
    assert len(announced) == 1
    (tmp_path / "key").write_text(" from-file \n")
    monkeypatch.setenv("RSTAR2_TEST_SECRET", "from-env")
    assert read_secret(file=str(tmp_path / "key"), env="RSTAR2_TEST_SECRET") == "from-file"
    assert read_secret(env="RSTAR2_TEST_SECRET") == "from-env"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_secret(file=str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="missing"):
        read_secret(file=str(tmp_path / "missing"))


async def test_a_handler_that_fails_is_a_500_and_the_server_serves_on(caplog: pytest.LogCaptureFixture) -> None:
    """An unexpected exception from a handler, or from a streamed answer after its
    head went, ends at most its own connection: logged with its traceback, never the
    listener (and every other client with it)."""

    async def parts() -> AsyncIterator[bytes]:
        yield b"first"
        raise RuntimeError("the source broke")

    async def handler(request: HTTPRequest) -> HTTPResponse:
        if request.path == b"/boom":
            raise RuntimeError("a bug in the handler")
        if request.path == b"/stream":
            return HTTPResponse(200, b"", b"text/plain", stream=parts())
        return HTTPResponse(200, b"ok", b"text/plain")

    server = HTTPServer(handler)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        with anyio.fail_after(20):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                answer = await http.get("/boom")
                assert answer.status_code == 500 and "error" in answer.json()
                with pytest.raises(httpx.RemoteProtocolError):  # cut, not complete
                    await http.get("/stream")
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:  # a new connection
                assert (await http.get("/")).content == b"ok"
        tg.cancel_scope.cancel()
    failures = [r for r in caplog.records if r.name == "httpgate" and r.exc_info]
    assert [str(r.exc_info[1]) for r in failures] == ["a bug in the handler", "the source broke"]


async def test_a_server_stopped_as_a_connection_arrives_drops_it_cleanly() -> None:
    """The connection waits in the backlog when the accept is cancelled in the same loop
    pass that found it: a cancelled ``sock_accept`` on asyncio would take it anyway and
    raise InvalidStateError in the loop (CPython gh-153761), leaving the client hanging."""
    server = HTTPServer(_Echo(), secret=SECRET)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        await anyio.wait_all_tasks_blocked()  # the server waits in its accept
        client = socket.create_connection(("127.0.0.1", port))  # on loopback: queued when this returns
        await anyio.lowlevel.checkpoint()  # the loop's next pass sees the listener readable, then runs us
        tg.cancel_scope.cancel()
    client.settimeout(10)
    with client:
        try:
            assert client.recv(1) == b""  # closed with the listener, never answered
        except ConnectionResetError:
            pass
