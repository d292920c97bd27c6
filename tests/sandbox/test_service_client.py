"""The HTTP service and the batching client: against a real pool, and against a mock transport."""

from __future__ import annotations

import socket

import anyio
import httpx
import msgspec
import pytest

from sandbox import ExecResult, SandboxClient, SandboxClosed, SandboxPool, SandboxService

from ._helpers import config

pytestmark = pytest.mark.anyio


def _dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return f"http://127.0.0.1:{port}"


async def test_service_end_to_end_with_failover() -> None:
    async with SandboxPool(config()) as pool, anyio.create_task_group() as tg:
        service = SandboxService(pool, port=0)
        port = await tg.start(service.serve)
        live = f"http://127.0.0.1:{port}"
        async with SandboxClient([_dead_address(), live], batch_size=8, retries=2) as client:
            results: dict[int, ExecResult] = {}

            async def call(i: int) -> None:
                results[i] = await client.run(f"print({i} + 1)")

            async with anyio.create_task_group() as calls:
                for i in range(30):
                    calls.start_soon(call, i)
            stats = client.statistics()
            timeout = await client.run("while True: pass", timeout=0.5)
        async with httpx.AsyncClient(base_url=live) as http:
            single = await http.post("/v1/run", json={"code": "print(input())", "stdin": "hey"})
            health = (await http.get("/health")).json()
            metrics = (await http.get("/metrics")).text
            bad = await http.post("/v1/batch", json={"calls": [{"code": "1", "bogus": 1}]})
            too_long = await http.post("/v1/batch", json={"calls": [{"code": "1", "timeout": 1e9}]})
            missing = await http.get("/nope")
        tg.cancel_scope.cancel()
    assert {i: r.stdout for i, r in results.items()} == {i: f"{i + 1}\n" for i in range(30)}
    assert stats.retries >= 1 and stats.by_status == {"ok": 30}
    assert timeout.status == "timeout"
    assert msgspec.json.decode(single.content, type=ExecResult).stdout == "hey\n"
    assert health["status"] == "ok" and health["workers_alive"] == 2 and health["layers"]["jail"] is True
    assert 'sandbox_calls_by_status_total{status="ok"} 31' in metrics
    assert 'sandbox_calls_by_status_total{status="timeout"} 1' in metrics
    assert "sandbox_queue_depth 0" in metrics and 'sandbox_call_latency_seconds_bucket{le="+Inf"} 32' in metrics
    assert bad.status_code == 400 and too_long.status_code == 400 and missing.status_code == 404


async def test_client_batches_calls() -> None:
    sizes = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls = msgspec.json.decode(request.content)["calls"]
        sizes.append(len(calls))
        return httpx.Response(200, json={"results": [{"status": "ok", "stdout": c["code"]} for c in calls]})

    async with SandboxClient(["http://a", "http://b"], batch_size=4, transport=httpx.MockTransport(handler)) as client:
        out = {}

        async def call(i: int) -> None:
            out[i] = (await client.run(str(i))).stdout

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(call, i)
    assert out == {i: str(i) for i in range(10)}
    assert sorted(sizes) == [2, 4, 4]


async def test_client_answers_internal_when_no_service_answers() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with SandboxClient(["http://a", "http://b"], retries=3, transport=httpx.MockTransport(handler)) as client:
        result = await client.run("print(1)")
        stats = client.statistics()
    assert result.status == "internal" and "unreachable" in result.stderr
    assert stats.retries == 3 and sorted(stats.addresses_down) == ["http://a", "http://b"]
    with pytest.raises(SandboxClosed):
        await client.run("print(1)")


async def test_client_reports_service_errors_as_internal() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="boom")

    async with SandboxClient(["http://a"], transport=httpx.MockTransport(handler)) as client:
        result = await client.run("print(1)")
    assert result.status == "internal" and "500" in result.stderr
