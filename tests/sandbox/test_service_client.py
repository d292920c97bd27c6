"""The HTTP service and the batching client: against a real pool, against a mock
transport, and against a service double that hangs mid-answer (a batch ends in its
read timeout or with the client, never hangs)."""

from __future__ import annotations


import anyio
import httpx
import msgspec
import pytest

from httpgate import Http11Transport
from rstar2_async.testing import STALLS, hung_server
from sandbox import ExecResult, SandboxClient, SandboxClosed, SandboxPool, SandboxService

from ._helpers import config, dead_address, wait_until

pytestmark = pytest.mark.anyio


async def test_service_end_to_end_with_failover() -> None:
    async with SandboxPool(config()) as pool, anyio.create_task_group() as tg:
        service = SandboxService(pool, port=0)
        port = await tg.start(service.serve)
        live = f"http://127.0.0.1:{port}"
        async with SandboxClient([dead_address(), live], batch_size=8, retries=2) as client:
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


async def test_a_batch_whose_client_left_leaves_the_queue() -> None:
    """One worker, three endless calls in one batch: one runs, two queue.  The client
    exits (its batch cancelled, its connection closed): the service cancels the
    batch, so the two queued calls leave the queue without running, while the
    running one still runs (it ends at its timeout, its result dropped)."""
    async with SandboxPool(config(workers=1, max_timeout_s=60.0)) as pool, anyio.create_task_group() as tg:
        port = await tg.start(SandboxService(pool, port=0).serve)
        async with SandboxClient([f"http://127.0.0.1:{port}"], batch_size=3) as client:
            async with anyio.create_task_group() as calls:
                for _ in range(3):
                    calls.start_soon(lambda: client.run("while True: pass", timeout=60.0))
                await wait_until(lambda: pool.statistics().queue_depth == 2)
                calls.cancel_scope.cancel()  # a caller's cancellation leaves the batch in flight...
            assert pool.statistics().queue_depth == 2
        await wait_until(lambda: pool.statistics().queue_depth == 0)  # ...the client's exit ends it
        stats = pool.statistics()
        tg.cancel_scope.cancel()
    assert stats.workers_busy == 1 and stats.by_status == {}


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


@pytest.mark.parametrize("where", sorted(STALLS))
async def test_a_batch_on_a_hung_service_ends_in_its_read_timeout(where: str) -> None:
    server = hung_server(where, anyio.Event())
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        address = f"http://127.0.0.1:{server.port}"
        with anyio.fail_after(30):  # a bound: a hang fails the test
            # the read timeout: the call's 0.1 s and a margin of 0.2 s
            async with SandboxClient([address], retries=1, read_margin_s=0.2, api_key="k") as client:
                result = await client.run("print(1)", timeout=0.1)
                await server.wait_gone(2)  # each attempt's connection closed on its timeout
        tg.cancel_scope.cancel()
    assert result.status == "internal" and "ReadTimeout" in result.stderr, result
    assert server.stalled == 2 and server.connections == 2


@pytest.mark.parametrize("where", sorted(STALLS))
async def test_closing_the_client_ends_a_batch_a_hung_service_holds(where: str) -> None:
    stalling = anyio.Event()
    server = hung_server(where, stalling)
    results: list[ExecResult] = []
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        address = f"http://127.0.0.1:{server.port}"
        with anyio.fail_after(30):
            async with anyio.create_task_group() as calls:
                async with SandboxClient([address]) as client:  # a read timeout of two minutes

                    async def call() -> None:
                        results.append(await client.run("print(1)"))

                    calls.start_soon(call)
                    await stalling.wait()
            await server.wait_gone(1)  # the batch's connection, closed when the client was
        tg.cancel_scope.cancel()
    assert [r.status for r in results] == ["internal"] and "closed while the call was in flight" in results[0].stderr


def test_http_and_https_addresses_go_through_our_transport() -> None:
    local = SandboxClient(["http://10.0.0.5:8089", "http://10.0.0.6:8089"])
    behind_tls = SandboxClient(["http://10.0.0.5:8089", "https://sandbox.example.com"])
    assert isinstance(local._http._transport, Http11Transport)
    assert isinstance(behind_tls._http._transport, Http11Transport)
