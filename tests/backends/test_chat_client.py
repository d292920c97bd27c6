"""The chat client against a server that hangs mid-answer: a turn ends in its
timeout or its cancellation, never hangs (``timeout`` around pytest turns a hang
into a failure); its plain-http client is on ``httpgate.Http11Transport``.  The
server's model list and ``/tokenize`` answer 404: no clamping."""

from __future__ import annotations

import anyio
import httpx
import pytest

from backends import ChatClient, SamplingParams, ServerUnavailable
from httpgate import Http11Transport
from rstar2_async.testing import STALLS, hung_server

pytestmark = pytest.mark.anyio

CHAT = [{"role": "user", "content": "What is 2*3?"}]


@pytest.mark.parametrize("where", sorted(STALLS))
async def test_a_turn_on_a_hung_server_ends_in_its_read_timeout(where: str) -> None:
    server = hung_server(where, anyio.Event(), only=b"/chat/completions")
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        url = f"http://127.0.0.1:{server.port}/v1"
        with anyio.fail_after(30):  # a bound: a hang fails the test
            async with ChatClient.from_url(url, model="m", max_retries=0, timeout=httpx.Timeout(0.5)) as client:
                with pytest.raises(ServerUnavailable, match="timed out"):
                    await client.chat(CHAT, max_tokens=8, sampling=SamplingParams())
                await server.wait_gone(1)  # its connection closed on the timeout, not with the client
        tg.cancel_scope.cancel()
    assert server.stalled == 1


@pytest.mark.parametrize("where", sorted(STALLS))
async def test_cancelling_a_turn_on_a_hung_server_closes_its_connection_at_once(where: str) -> None:
    stalling = anyio.Event()
    server = hung_server(where, stalling, only=b"/chat/completions")
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        url = f"http://127.0.0.1:{server.port}/v1"
        with anyio.fail_after(30):
            async with ChatClient.from_url(url, model="m", max_retries=0) as client:  # a read timeout of 10 minutes
                async with anyio.create_task_group() as turns:
                    turns.start_soon(lambda: client.chat(CHAT, max_tokens=8, sampling=SamplingParams()))
                    await stalling.wait()
                    turns.cancel_scope.cancel()
                await server.wait_gone(1)  # the stalled request's connection, before the client closes
        tg.cancel_scope.cancel()
    assert server.stalled == 1


def test_http_and_https_go_through_our_transport_and_a_proxy_through_the_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    local = ChatClient.from_url("http://127.0.0.1:8000/v1", model="m")
    hosted = ChatClient.from_url("https://api.example.com/v1", model="m")
    assert isinstance(local._client._client._transport, Http11Transport)  # type: ignore[attr-defined]
    assert isinstance(hosted._client._client._transport, Http11Transport)  # type: ignore[attr-defined]
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.com:3128")  # ours speaks no proxy: the SDK's does
    proxied = ChatClient.from_url("https://api.example.com/v1", model="m")
    assert not isinstance(proxied._client._client._transport, Http11Transport)  # type: ignore[attr-defined]
