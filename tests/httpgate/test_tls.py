"""``https://`` through the project's own transport (``Http11Transport`` over anyio's
TLS streams) against a local TLS server double with a self-signed certificate made
here (the ``openssl`` command): answers and keep-alive, a certificate that does not
verify, and the same cancellation guarantees as plain http (a request stalled
mid-headers, mid-body or mid-handshake ends at once and closes its socket).  And a
pool's streamed turn over TLS that fails over from a server that stalls mid-stream."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import anyio
import h11
import httpx
import msgspec
import pytest
from anyio.abc import ByteStream

from backends import RetryPolicy, SamplingParams, ServerPool
from httpgate import Http11Transport, transport_for
from rstar2_async.testing import FakeRawServer, completion_events, raw_head, stalling_stream

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (an EC key: made in milliseconds)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    out = tmp_path_factory.mktemp("tls")
    cert, key = out / "cert.pem", out / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


@pytest.fixture
def client_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


def url(port: int, path: str = "/") -> httpx.URL:
    return httpx.URL(f"https://127.0.0.1:{port}{path}")


async def echo(stream: ByteStream, request: h11.Request, body: bytes) -> bool:
    await stream.send(raw_head(200, len(body)) + body)
    return True


async def test_https_requests_go_through_our_transport_and_keep_their_connection(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    assert isinstance(transport_for("https://example.org/v1"), Http11Transport)
    server = FakeRawServer(echo, ssl_context=server_context)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport(ssl_context=client_context) as transport:
            assert await transport.post(url(server.port), [], b"one") == (200, b"one")
            async with httpx.AsyncClient(transport=transport, base_url=f"https://127.0.0.1:{server.port}") as client:
                response = await client.post("/", content=b"two")
            assert (response.status_code, response.content) == (200, b"two")
        assert server.connections == 1 and server.requests == 2
        tg.cancel_scope.cancel()


async def test_a_certificate_that_does_not_verify_is_a_connect_error(server_context: ssl.SSLContext) -> None:
    server = FakeRawServer(echo, ssl_context=server_context)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport() as transport:  # the default CAs: our self-signed one is not among them
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await transport.post(url(server.port), [], b"")
            assert transport._open == 0
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("where", ["handshake", "headers", "body"])
async def test_cancelling_a_stalled_https_request_closes_its_connection_at_once(
    where: str, server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    """Stalled in the TLS handshake, mid-headers or mid-body, with an hour's
    timeouts: the cancellation alone ends the request, at once, and the server sees
    its client go before the transport is closed."""

    async def stalls(stream: ByteStream, request: h11.Request, body: bytes) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-" if where == "headers" else raw_head(200, 100) + b'{"choi')
        await server.stall(stream)
        return False

    server = FakeRawServer(stalls, ssl_context=server_context, handshake=where != "handshake")
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport(timeout=httpx.Timeout(3600.0), ssl_context=client_context) as transport:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as requests:
                    requests.start_soon(transport.post, url(server.port), [], b"")
                    await anyio.wait_all_tasks_blocked()
                    assert server.stalled == 1
                    scope.cancel()
            with anyio.fail_after(20):  # a bound: a socket left open would hang the test, not fail it
                await server.wait_gone(1)
            assert transport._open == 0 and not transport._idle
        tg.cancel_scope.cancel()


async def test_a_handshake_that_never_ends_is_a_connect_timeout(server_context: ssl.SSLContext) -> None:
    server = FakeRawServer(echo, ssl_context=server_context, handshake=False)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        async with Http11Transport(timeout=httpx.Timeout(3600.0, connect=0.2)) as transport:
            with pytest.raises(httpx.ConnectTimeout, match="https://127.0.0.1"):
                await transport.post(url(server.port), [], b"")
        tg.cancel_scope.cancel()


async def test_a_pools_streamed_turn_over_https_fails_over_from_a_server_that_stalls_mid_stream(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    """Two https servers; the first streams 3 of a turn's tokens and stalls: the pool
    gives it up after ``stall_timeout_s`` and the second continues from the 3 tokens
    (each token is its absolute position: none lost, none twice)."""

    def events_for(stall_after: int | None):  # noqa: ANN202
        async def events(body: bytes) -> list[bytes]:
            request = msgspec.json.decode(body)
            start = len(request["prompt"])
            ids = list(range(start, start + request["max_tokens"]))
            choice = {"token_ids": ids, "logprobs": {"token_logprobs": [-0.5] * len(ids)}, "finish_reason": "length"}
            sse = completion_events({"choices": [choice]}, 1)
            return sse[:stall_after] if stall_after is not None else [*sse, b"data: [DONE]\n\n"]

        return events

    servers = [stalling_stream(events_for(3), ssl_context=server_context),
               stalling_stream(events_for(None), ssl_context=server_context)]  # fmt: skip
    async with anyio.create_task_group() as tg:
        for server in servers:
            await tg.start(server.serve)
        urls = [f"https://127.0.0.1:{s.port}" for s in servers]
        transport = Http11Transport(ssl_context=client_context)
        async with ServerPool(
            urls, model="m", policy="round_robin", stall_timeout_s=0.5, poll_interval_s=3600,
            retry=RetryPolicy(max_retries=0), transport=transport,
        ) as pool:  # fmt: skip
            with anyio.fail_after(30):
                c = await pool.generate([0, 1, 2], max_tokens=8, sampling=SamplingParams())
            stats = pool.statistics()
        tg.cancel_scope.cancel()
    assert (c.token_ids, c.finish_reason) == (list(range(3, 11)), "length")
    assert (stats.stalls, stats.tokens_kept, servers[0].stalled) == (1, 3, 1)
