"""A short inference-pool chaos run (benchmarks/pool_chaos.py, 128 in flight): 4 server doubles that
die, hang, answer garbage or 500 and come back; every trajectory finished exactly once.  And many
trajectories through a server that stalls mid-answer: no turn stays stuck past its cancellation."""

from __future__ import annotations

import anyio
import h11
import msgspec
import pytest
from anyio.abc import SocketStream

from backends import RetryPolicy, SamplingParams, ServerPool
from rstar2_async.testing import FakeRawServer, pool_chaos, raw_head, sse_answer

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_short_chaos_run_finishes_every_trajectory_once() -> None:
    out = await pool_chaos(1000, chaos=True, concurrency=128, time_budget_s=120.0, seed=2)
    assert (out["lost"], out["duplicated"], out["failed"]) == (0, 0, 0), out["first_failure"]
    assert out["finished"] == 1000
    assert sum(out["faults"].values()) >= 3 and out["failovers"] >= 1 and out["servers_back"] >= 1


def _completion(body: bytes) -> bytes:
    """The vLLM double's answer, streamed a chunk a token: each token is its absolute position."""
    request = msgspec.json.decode(body)
    start = len(request["prompt"])
    ids = list(range(start, start + request["max_tokens"]))
    choice = {"token_ids": ids, "logprobs": {"token_logprobs": [0.0] * len(ids)}, "finish_reason": "stop"}
    return sse_answer({"choices": [choice]})


async def _plain(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
    if request.target.endswith(b"/metrics"):
        text = b'vllm:cache_config_info{kv_cache_size_tokens="100000"} 1.0\nvllm:num_requests_running 0\n'
        await stream.send(raw_head(200, len(text)) + text)
    elif request.target.endswith(b"/models"):
        await stream.send(raw_head(200, 12) + b'{"data": []}')
    else:
        answer = _completion(body)
        await stream.send(raw_head(200, len(answer)) + answer)
    return True


@pytest.mark.parametrize("where", ["headers", "body"])
async def test_turns_stalled_on_a_hung_server_fail_over_and_all_finish(where: str) -> None:
    """Many trajectories at once through a server that stalls every other answer
    mid-way (headers or body) and keeps coming back, beside a healthy one: each
    stalled turn is cancelled by the pool's stall timeout, fails over and
    finishes from the tokens it has; none stays stuck in the client past its cancellation (httpx's default
    transport lost turns here: a shielded close waiting on a lock wake-up that
    anyio's asyncio Lock lost, see httpgate/_client.py)."""
    trajectories, turns = 200, 3

    async def hangs(stream: SocketStream, request: h11.Request, body: bytes) -> bool:
        if not request.target.endswith(b"/completions") or hung.requests % 2:
            return await _plain(stream, request, body)
        answer = _completion(body)
        await stream.send(
            b"HTTP/1.1 200 OK\r\ncontent-" if where == "headers" else raw_head(200, len(answer)) + answer[:7]
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
            urls, model="m", poll_interval_s=0.05, stall_timeout_s=2.0, max_failovers=50, policy="round_robin",
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
